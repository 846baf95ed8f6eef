"""What a running graph task may ask about its run: whether it was cancelled.

A task is ``task(inputs) -> dict``; the job that runs it (``runner.run_task``) keeps its
JobContext here while the task runs, so a long task can stop where it checks:

    for page in pages:
        raise_if_task_cancelled()
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tasksapp.engine.handlers import JobContext

_running: ContextVar[JobContext | None] = ContextVar("graph_task_job", default=None)


@contextmanager
def running_task_job(ctx: JobContext) -> Iterator[None]:
    token = _running.set(ctx)
    try:
        yield
    finally:
        _running.reset(token)


def task_cancel_requested() -> bool:
    """True once the graph (or the task's job) was cancelled while the task runs."""
    ctx = _running.get()
    return ctx is not None and ctx.cancel_requested


def raise_if_task_cancelled() -> None:
    """Raise JobCancelled if the task was asked to stop: the task's run fails with it
    and, its graph being cancelled, releases nothing."""
    ctx = _running.get()
    if ctx is not None:
        ctx.raise_if_cancelled()
