"""The framework's view of a task's job: its TaskResult, status, errors."""

from __future__ import annotations

from dataclasses import replace

from django.utils import timezone
from django_tasks import TaskResult, TaskResultStatus
from django_tasks.base import Task, TaskError
from django_tasks.signals import task_finished


def job_task_result(job, task: Task) -> TaskResult:
    """The framework's view of a task's job."""
    from tasksapp.engine.models import JobState

    payload = job.payload or {}
    status = STATUSES[job.state]
    task = replace(
        task,
        priority=payload.get("priority", task.priority),
        queue_name=payload.get("queue_name", job.queue),
        run_after=job.run_at,
    )
    result = make_result(
        task,
        result_id=str(job.id),
        status=status,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=payload.get("backend", task.backend),
        attempts=job.attempts,
        errors=[task_error(entry) for entry in job.errors or []],
    )
    object.__setattr__(result, "enqueued_at", job.created_at)
    object.__setattr__(result, "started_at", job.started_at)
    object.__setattr__(result, "last_attempted_at", job.started_at)
    object.__setattr__(result, "finished_at", job.finished_at if result.is_finished else None)
    if job.state == JobState.SUCCEEDED:
        object.__setattr__(result, "_return_value", job.result)
    return result


# Job states as the framework's statuses. A job waiting again (failed, with attempts left)
# or claimed but not started is READY; one that can no longer run (dead, cancelled, lost)
# is FAILED.
STATUSES = {
    "scheduled": TaskResultStatus.READY,
    "claimed": TaskResultStatus.READY,
    "failed": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
    "lost": TaskResultStatus.FAILED,
}


def make_result(
    task: Task,
    *,
    result_id: str,
    status: TaskResultStatus,
    args,
    kwargs,
    backend: str,
    attempts: int = 0,
    errors: list[TaskError] | None = None,
) -> TaskResult:
    return TaskResult(
        task=task,
        id=result_id,
        status=status,
        enqueued_at=None,
        started_at=None,
        last_attempted_at=None,
        finished_at=None,
        args=list(args),
        kwargs=dict(kwargs),
        backend=backend,
        errors=errors or [],
        worker_ids=["tempo"] * attempts,
    )


def finish(result: TaskResult, status: TaskResultStatus, backend: type) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(backend, task_result=result)


def task_error(entry: dict) -> TaskError:
    """A failed attempt's error entry as the framework's TaskError: the exception's class
    (from the traceback's last line, or the entry's 'Type: message') and the traceback."""
    trace = entry.get("traceback") or entry.get("error", "")
    last = trace.rstrip("\n").rsplit("\n", 1)[-1]
    name = last.split(":", 1)[0].strip() if ":" in last else ""
    if not name.replace(".", "").replace("_", "").isalnum():
        name = "Exception"
    path = name if "." in name else f"builtins.{name}"
    return TaskError(exception_class_path=path, traceback=trace)
