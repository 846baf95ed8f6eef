"""Wake the Celery worker's event loop when a pool thread frees a slot.

With the threads pool, a task finishing on a pool thread does not wake the worker's
event loop (kombu's hub): if its prefetch window was full, the hub keeps sleeping in
epoll and the next due job waits in Redis for the next unrelated timer (up to seconds).
A self-pipe registered with the hub, written whenever a task starts or ends, lets the hub
read the broker again at once.
"""

from __future__ import annotations

import contextlib
import os

from celery import bootsteps
from celery.signals import task_postrun, task_prerun

_wake_fd: int | None = None
TICK_SECONDS = 0.01


def _tick() -> None:
    """Nothing to do: waking up is the point (the hub re-checks its prefetch window)."""


class HubWakeup(bootsteps.StartStopStep):
    requires = {"celery.worker.components:Hub"}

    def start(self, worker) -> None:
        global _wake_fd
        hub = getattr(worker, "hub", None)
        if hub is None:
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        hub.add_reader(read_fd, _drain, read_fd)
        _wake_fd = write_fd
        # With acks_late the prefetch slot frees when the message is acknowledged, which
        # happens on the pool thread just after task_postrun: a short tick lets the hub
        # see the free slot without waiting for an unrelated timer.
        hub.call_repeatedly(TICK_SECONDS, _tick)


def _drain(read_fd: int) -> None:
    try:
        while os.read(read_fd, 4096):
            pass
    except BlockingIOError:
        pass


@task_prerun.connect
@task_postrun.connect
def _wake(**kwargs) -> None:
    if _wake_fd is not None:
        with contextlib.suppress(BlockingIOError):  # a full pipe: the hub is awake anyway
            os.write(_wake_fd, b"\0")
