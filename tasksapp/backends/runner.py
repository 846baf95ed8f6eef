"""The handler of a task's jobs, and which tasks are declared: only those run."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

from django.utils import timezone
from django.utils.module_loading import import_string
from django_tasks import TaskContext, TaskResult, TaskResultStatus
from django_tasks.base import Task
from django_tasks.exceptions import InvalidTaskError
from django_tasks.signals import task_started
from django_tasks.utils import normalize_json

from tasksapp.backends.results import finish, make_result
from tasksapp.engine.handlers import HandlerError, JobContext, registry

ERR_UNDECLARED = (
    "{path} is not a task declared at module level ('@task' on a function of an "
    "importable module): only declared tasks run."
)


class TaskRunner:
    """The handler of a task's jobs: calls the task with the job's arguments. Its origin is
    the task function's, so declaring the task again (`.using()`) registers nothing new."""

    def __init__(self, task: Task, backend: type) -> None:
        self.task, self.backend = task, backend
        self.__module__ = task.func.__module__
        self.__qualname__ = task.func.__qualname__

    def __call__(self, ctx: JobContext) -> Any:
        payload = ctx.payload
        result = make_result(
            replace(
                self.task,
                priority=payload.get("priority", self.task.priority),
                queue_name=payload.get("queue_name", self.task.queue_name),
                run_after=None,
            ),
            result_id=str(ctx.job_id),
            status=TaskResultStatus.RUNNING,
            args=payload.get("args", []),
            kwargs=payload.get("kwargs", {}),
            backend=payload.get("backend", self.task.backend),
            attempts=ctx.attempt,
        )
        object.__setattr__(result, "started_at", timezone.now())
        object.__setattr__(result, "last_attempted_at", result.started_at)
        task_started.send(sender=self.backend, task_result=result)
        try:
            value = self._call(result)
        except BaseException:
            finish(result, TaskResultStatus.FAILED, self.backend)
            raise
        value = normalize_json(value)
        object.__setattr__(result, "_return_value", value)
        finish(result, TaskResultStatus.SUCCESSFUL, self.backend)
        return value

    def _call(self, result: TaskResult) -> Any:
        if self.task.takes_context:
            return self.task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        return self.task.call(*result.args, **result.kwargs)


def check_declared(task: Task) -> None:
    """Only a task its module declares runs: the task must be what its dotted path names."""
    declared = runner_named(task.module_path)
    try:
        found = import_string(f"{task.func.__module__}.{task.func.__name__}")
    except ImportError:
        found = None
    same = isinstance(found, Task) and found.func is task.func
    if declared is None or declared.task.func is not task.func or not same:
        raise InvalidTaskError(ERR_UNDECLARED.format(path=task.module_path))


def being_declared(task: Task) -> bool:
    """Whether `@task` is declaring the function now: its module does not bind its name
    yet (a decorator runs before the name is bound). A Task made later around a function
    its module binds as a plain function is not a declared task."""
    module = sys.modules.get(task.func.__module__)
    return module is not None and getattr(module, task.func.__name__, None) is None


def runner_named(name: str) -> TaskRunner | None:
    """The runner registered as the handler `name`, if that handler is a task's."""
    try:
        handler = registry.get(name)
    except HandlerError:
        return None
    return handler if isinstance(handler, TaskRunner) else None
