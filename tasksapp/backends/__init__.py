"""Django's Tasks API on Tempo: `TASKS = {"default": {"BACKEND":
"tasksapp.backends.TempoBackend"}}`.

A `@task` function (`from django_tasks import task`) becomes a Tempo handler named by its
dotted path when it is declared, so its jobs show on the dashboard like every job and
only declared tasks run: a job naming any other path is refused when it is enqueued (the
handler is not registered) and again when it would run. `enqueue()` inserts one job in
the caller's transaction (a rollback leaves nothing to run; with Tempo's tables on a
database of their own, TEMPO_DATABASE, a transaction open on the default database defers
the insert to its commit, see `enqueue`), at `run_after` (never
earlier), on the task's queue, at the Tempo priority its -100..100 priority maps to
(`tempo_priority`). A task runs once: one attempt, its database writes committed with its
success (transactional delivery, a transaction of its own). `get_result()` and
`refresh()` read the job: its state as the framework's status, its return value, its
error with the traceback.

Task modules: the `tasks` module of each installed app and those listed in
`TEMPO_TASK_MODULES`, imported at start-up by every process (TasksappConfig.ready).
"""

from __future__ import annotations

import math

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from django_tasks import TaskResult, TaskResultStatus
from django_tasks.backends.base import BaseTaskBackend
from django_tasks.base import Task
from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
from django_tasks.signals import task_enqueued

from tasksapp.backends.results import job_task_result, make_result
from tasksapp.backends.runner import (
    ERR_UNDECLARED,
    TaskRunner,
    being_declared,
    check_declared,
    runner_named,
)
from tasksapp.engine.handlers import HandlerError, import_listed_modules, registry

__all__ = ["ERR_UNDECLARED", "TaskRunner", "TempoBackend", "job_task_result", "tempo_priority"]

APP_TASK_MODULE = "tasks"
ERR_QUEUE = "Queue '{queue}' is not valid for Tempo: {reason}"
ERR_NOT_FOUND = "There is no task result {result_id!r}."
ERR_NOT_A_TASK = "Job {result_id} is not a task of this backend ({handler})."
ERR_BACKEND = "TASKS['{alias}']: the backend '{path}' cannot be imported: {reason}."
# Priorities: the framework's -100..100 onto Tempo's 0..9 (README, "Use Tempo in your
# Django project"). 0, the framework's default, is Tempo's normal (5); 76..100 is
# critical (9), claimed with the critical lead; -81..-100 is the lowest level (0).
NORMAL = 5


def tempo_priority(priority: int) -> int:
    """The Tempo level of a framework priority: -100..-81 → 0, -80..-61 → 1, -60..-41 → 2,
    -40..-21 → 3, -20..-1 → 4, 0 → 5, 1..25 → 6, 26..50 → 7, 51..75 → 8, 76..100 → 9."""
    if priority >= 0:
        return NORMAL + math.ceil(priority / 25)
    return NORMAL + math.floor(priority / 20)


class TempoBackend(BaseTaskBackend):
    supports_defer = True
    supports_get_result = True
    supports_priority = True
    supports_async_task = False

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        # Without QUEUES every valid Tempo queue name is accepted (a worker serves it
        # with `tempo_worker --queues`); with QUEUES only those.
        self.queues = set(params.get("QUEUES", []))
        self.options = params.get("OPTIONS", {})

    def validate_task(self, task: Task) -> None:
        """The framework's checks, a Tempo queue name; a valid task is declared as the
        handler of its jobs (named by its dotted path)."""
        from tasksapp.engine.options import JobOptionsError, validated_queue

        super().validate_task(task)
        try:
            validated_queue(task.queue_name)
        except JobOptionsError as exc:
            raise InvalidTaskError(ERR_QUEUE.format(queue=task.queue_name, reason=exc)) from exc
        runner = runner_named(task.module_path)
        if runner is not None and runner.task.func is task.func:
            return  # declared already (this is a copy: `.using()`, a result's task)
        if not being_declared(task):
            raise InvalidTaskError(ERR_UNDECLARED.format(path=task.module_path))
        try:
            registry.register(
                TaskRunner(task, type(self)), name=task.module_path, own_transaction=True
            )
        except HandlerError as exc:
            raise InvalidTaskError(str(exc)) from exc

    def enqueue(self, task: Task, args, kwargs) -> TaskResult:
        """Store the task's job. Inside a transaction of the default database while
        Tempo's tables are on another one, the job is checked now and stored when that
        transaction commits (never if it rolls back): until then the result's `id` is
        empty; it is set, and `task_enqueued` sent, at the commit."""
        from tasksapp.engine.db import tempo_is_separate
        from tasksapp.engine.models import Delivery
        from tasksapp.engine.services import JobInputError, job_schedule, job_schedule_check

        self.validate_task(task)
        check_declared(task)
        result = make_result(
            task,
            result_id="",
            status=TaskResultStatus.READY,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
        )
        payload = {
            "args": result.args,
            "kwargs": result.kwargs,
            "priority": task.priority,
            "queue_name": task.queue_name,
            "backend": self.alias,
        }
        now = timezone.now()
        arguments = dict(
            handler=task.module_path,
            run_at=max(task.run_after or now, now),
            payload=payload,
            max_attempts=1,
            delivery=Delivery.TRANSACTIONAL,
            queue=task.queue_name,
            priority=tempo_priority(task.priority),
        )

        def store() -> None:
            job = job_schedule(**arguments)
            object.__setattr__(result, "id", str(job.id))
            object.__setattr__(result, "enqueued_at", job.created_at)
            task_enqueued.send(type(self), task_result=result)

        try:
            if tempo_is_separate() and transaction.get_connection().in_atomic_block:
                job_schedule_check(**arguments)
                transaction.on_commit(store)  # the default database's commit
            else:
                store()
        except JobInputError as exc:
            raise InvalidTaskError(str(exc)) from exc
        return result

    def get_result(self, result_id: str) -> TaskResult:
        from tasksapp.engine.models import Job

        job_id = int(result_id) if str(result_id).isdigit() else None
        job = Job.objects.filter(id=job_id).first() if job_id is not None else None
        if job is None:
            raise TaskResultDoesNotExist(ERR_NOT_FOUND.format(result_id=result_id))
        runner = runner_named(job.handler)
        if runner is None:
            raise TaskResultDoesNotExist(
                ERR_NOT_A_TASK.format(result_id=result_id, handler=job.handler)
            )
        return job_task_result(job, runner.task)


def task_modules() -> list[str]:
    """The modules that declare tasks: each installed app's `tasks`, then the listed ones."""
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    modules = [
        f"{config.name}.{APP_TASK_MODULE}"
        for config in apps.get_app_configs()
        if module_has_submodule(config.module, APP_TASK_MODULE)
    ]
    modules += list(getattr(settings, "TEMPO_TASK_MODULES", []))
    return list(dict.fromkeys(modules))


def tempo_backend_aliases() -> list[str]:
    """The TASKS aliases whose backend is Tempo's; ImproperlyConfigured naming a backend
    that cannot be imported."""
    aliases = []
    for alias, params in (getattr(settings, "TASKS", None) or {}).items():
        path = params.get("BACKEND", "")
        try:
            backend = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(
                ERR_BACKEND.format(alias=alias, path=path, reason=exc)
            ) from exc
        if isinstance(backend, type) and issubclass(backend, TempoBackend):
            aliases.append(alias)
    return aliases


def load_task_modules() -> list[str]:
    """Import the task modules (at start-up), when a TASKS backend is Tempo's."""
    if not tempo_backend_aliases():
        return []
    modules = task_modules()
    import_listed_modules(modules, setting="TEMPO_TASK_MODULES")
    return modules
