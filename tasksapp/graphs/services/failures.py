"""What a failed task leads to, by the graph's strategy, and the rollback job.

Everything here but the rollback job runs with the GraphRun row locked, inside the
transaction of the child job whose task failed: the failure and its consequences commit
together with that job, exactly once.

- abort: the graph stops (aborted); tasks not started are skipped and their child jobs
  cancelled. A task already running finishes, and its outcome is recorded, but it
  releases nothing.
- rerun: the task's rescue hook ran before the lock; a new child job runs the task again
  after the retry policy's delay, with the inputs the hook replaced; out of attempts, abort.
- restart: child jobs not started are cancelled, every TaskRun is reset and the tasks with
  no predecessor are released again in a new generation; a task of the old generation
  still running finds itself stale and its outcome is dropped. Out of restarts, abort.
- rollback: the graph stops releasing (rolling_back); once no task is running any more, a
  rollback job calls ``rollback(inputs, outputs)`` of every completed task, latest
  completion first, then the graph is rolled_back.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.utils import timezone

from tasksapp.engine import Snooze
from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.models import Delivery, Job, JobState
from tasksapp.engine.models.jobs import FINAL_STATES
from tasksapp.engine.services import job_cancel_waiting, job_schedule
from tasksapp.graphs.models import GraphRun, GraphState, Strategy, TaskRun, TaskState
from tasksapp.graphs.registry import default_registry

from .common import (
    ERR_RERUNS_EXHAUSTED,
    ERR_RESTARTS_EXHAUSTED,
    ERR_ROLLBACK_FAILED,
    ERR_TASK_FAILED,
    ROLLBACK_HANDLER,
    ROLLBACK_JOB_ATTEMPTS,
    ROLLBACK_JOB_POLICY,
    Outcome,
    describe,
    error_entry,
    graph_ended,
    locked,
    plan_of,
    record_outcome,
    release,
    task_jobs_create,
)

log = logging.getLogger(__name__)

UNFINISHED = (TaskState.WAITING, TaskState.READY)
ROLLBACK_WAIT_SECONDS = 0.5  # between the rollback job's looks at tasks still running


def task_failed(graph: GraphRun, run: TaskRun, outcome: Outcome) -> dict[str, Any]:
    """Apply the graph's strategy to a failed run of ``run``. The graph is running and
    locked."""
    if outcome.retry_in is not None:
        return _retry(graph, run, outcome)
    record_outcome(graph, run, outcome)
    attempts = run.attempts + 1
    if graph.strategy == Strategy.RESTART and graph.restarts < graph.max_restarts:
        _restart(graph)
        return {"outcome": "failed", "graph": "restarted", "generation": graph.generation}
    if graph.strategy == Strategy.ROLLBACK:
        _rollback_begin(graph, ERR_TASK_FAILED.format(task=run.task, error=outcome.error))
        return {"outcome": "failed", "graph": GraphState.ROLLING_BACK}
    if graph.strategy == Strategy.RERUN and attempts > 1:
        error = ERR_RERUNS_EXHAUSTED.format(task=run.task, attempts=attempts, error=outcome.error)
    elif graph.strategy == Strategy.RESTART and graph.restarts:
        error = ERR_RESTARTS_EXHAUSTED.format(
            task=run.task, restarts=graph.restarts, error=outcome.error
        )
    else:
        error = ERR_TASK_FAILED.format(task=run.task, error=outcome.error)
    graph_stop(graph, state=GraphState.ABORTED, error=error)
    return {"outcome": "failed", "graph": GraphState.ABORTED}


def _retry(graph: GraphRun, run: TaskRun, outcome: Outcome) -> dict[str, Any]:
    """Rerun: the failure is recorded, the task stays ready with a new child job due
    after the policy's delay."""
    entry = error_entry(graph, run.attempts + 1, outcome.error)
    run.attempts += 1
    due = timezone.now() + dt.timedelta(seconds=outcome.retry_in or 0.0)
    (job,) = task_jobs_create(graph, [run], run_at=due)
    TaskRun.objects.filter(id=run.id, state=TaskState.READY).update(
        attempts=run.attempts,
        inputs=outcome.inputs,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        error=outcome.error,
        errors=[*run.errors, entry],
        rescued={**run.rescued, **outcome.rescued},
        job=job,
    )
    return {"outcome": "retry", "retry_in": outcome.retry_in, "rescued": sorted(outcome.rescued)}


def _cancelled(job_id: int | None) -> bool:
    """Cancel a child job that has not started; False if it is claimed or running (it
    is not interrupted: its outcome is recorded when it ends)."""
    if job_id is None:
        return True
    if job_cancel_waiting(job_id=job_id):
        return True
    return Job.objects.filter(id=job_id, state=JobState.CANCELLED).exists()


def stop_others(graph: GraphRun) -> int:
    """Skip every task that has not started (cancelling its child job); return how many
    are still running."""
    running, skipped = 0, []
    pending = TaskRun.objects.filter(graph_run_id=graph.id, state__in=UNFINISHED)
    for run in pending.order_by("id"):
        if run.state == TaskState.READY and not _cancelled(run.job_id):
            running += 1
        else:
            skipped.append(run.id)
    TaskRun.objects.filter(id__in=skipped).update(state=TaskState.SKIPPED)
    return running


def graph_stop(graph: GraphRun, *, state: str, error: str) -> None:
    """The graph ends in ``state`` (aborted, rolled_back or failed) with ``error``."""
    stop_others(graph)
    log.info("graph %s %s: %s", graph.id, state, error)
    graph.state, graph.error, graph.finished_at = state, error, timezone.now()
    graph.save(update_fields=["state", "error", "finished_at"])
    graph_ended(graph)


def _restart(graph: GraphRun) -> None:
    stop_others(graph)
    TaskRun.objects.filter(graph_run_id=graph.id).update(
        state=TaskState.WAITING,
        attempts=0,
        inputs=None,
        rescued={},
        result=None,
        error="",
        done_order=None,
        job=None,
        released_at=None,
        started_at=None,
        finished_at=None,
    )
    graph.generation += 1
    graph.restarts += 1
    graph.values = graph.has
    graph.save(update_fields=["generation", "restarts", "values"])
    roots = plan_of(graph.id, graph.started_at).ready(())
    release(graph, list(TaskRun.objects.filter(graph_run_id=graph.id, task__in=roots)))


# --- rollback -------------------------------------------------------------------------


def _rollback_begin(graph: GraphRun, error: str) -> None:
    running = stop_others(graph)
    graph.state, graph.error = GraphState.ROLLING_BACK, error
    graph.save(update_fields=["state", "error"])
    if not running:
        rollback_schedule(graph)


def rollback_schedule(graph: GraphRun) -> None:
    """The rollback job (once per generation: its key says so)."""
    job_schedule(
        handler=ROLLBACK_HANDLER,
        run_at=timezone.now(),
        payload={"graph_run_id": graph.id},
        idempotency_key=f"graph:{graph.id}:rollback:g{graph.generation}",
        max_attempts=ROLLBACK_JOB_ATTEMPTS,
        retry_policy=ROLLBACK_JOB_POLICY,
        delivery=Delivery.AT_LEAST_ONCE,
    )


def after_settled(graph: GraphRun) -> None:
    """A task that was running when the graph stopped has finished: once none is left
    running, a graph that rolls back can start its rollback job."""
    if graph.state != GraphState.ROLLING_BACK:
        return
    if not TaskRun.objects.filter(graph_run_id=graph.id, state=TaskState.READY).exists():
        rollback_schedule(graph)


def _rollback_next(graph_run_id: int) -> TaskRun | None:
    """The latest completed task not rolled back yet; None (and the graph rolled back)
    when none is left, or None if the graph is not rolling back."""
    with tempo_atomic():
        graph = locked(graph_run_id)
        if graph.state != GraphState.ROLLING_BACK:
            return None
        runs = TaskRun.objects.filter(graph_run_id=graph.id, state=TaskState.SUCCEEDED)
        run = runs.order_by("-done_order").first()
        if run is None:
            ended = GraphState.CANCELLED if graph.cancelled_at else GraphState.ROLLED_BACK
            graph.state, graph.finished_at = ended, timezone.now()
            graph.save(update_fields=["state", "finished_at"])
            graph_ended(graph)
        return run


def _rollback_failed(graph_run_id: int, run: TaskRun, error: str) -> None:
    with tempo_atomic():
        graph = locked(graph_run_id)
        message = ERR_ROLLBACK_FAILED.format(task=run.task, error=error)
        TaskRun.objects.filter(id=run.id).update(
            errors=[*run.errors, error_entry(graph, run.attempts, message)]
        )
        graph_stop(graph, state=GraphState.FAILED, error=f"{graph.error}; {message}")


def _rolled_back(graph_run_id: int, run: TaskRun) -> None:
    with tempo_atomic():
        locked(graph_run_id)
        TaskRun.objects.filter(id=run.id, state=TaskState.SUCCEEDED).update(
            state=TaskState.ROLLED_BACK
        )


def _tasks_still_running(graph_run_id: int) -> bool:
    """Whether a task of the graph still runs (a cancelled graph's rollback job waits for
    it: its success is rolled back too). A task whose child job ended without an outcome
    (cancelled at its start, or after its worker died) is skipped."""
    with tempo_atomic():
        locked(graph_run_id)
        ready = TaskRun.objects.filter(graph_run_id=graph_run_id, state=TaskState.READY)
        ended = ready.filter(job__state__in=FINAL_STATES)
        ended.update(state=TaskState.SKIPPED)
        return ready.exists()


def graph_rollback(*, graph_run_id: int, last_attempt: bool = True) -> dict[str, Any]:
    """The rollback job: undo completed tasks, latest completion first, each committed on
    its own (a retry of this job goes on where it stopped). A hook that fails makes the
    job fail and retry; on its last attempt the graph ends failed, the rest not undone.
    While a task still runs (a cancelled graph) it snoozes, using no attempt."""
    if _tasks_still_running(graph_run_id):
        raise Snooze(ROLLBACK_WAIT_SECONDS)
    undone = []
    while (run := _rollback_next(graph_run_id)) is not None:
        try:
            hook = default_registry.get(run.task).rollback
            if hook is not None:
                hook(dict(run.inputs or {}), dict(run.result or {}))
        except Exception as exc:
            if not last_attempt:
                raise
            _rollback_failed(graph_run_id, run, describe(exc))
            return {"rolled_back": undone, "failed": run.task}
        _rolled_back(graph_run_id, run)
        undone.append(run.task)
    return {"rolled_back": undone}
