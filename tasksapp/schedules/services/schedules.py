"""Schedules: create, edit, pause, resume, run now, delete. Bad input raises
ScheduleInputError and stores nothing. An edit applies from the next fire time not yet
planned: the jobs already planned keep their time and options."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import IntegrityError
from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.models import Delivery, Job
from tasksapp.engine.models.jobs import DUE_STATES
from tasksapp.engine.options import (
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    JobOptions,
    JobOptionsError,
    validated_handler,
    validated_payload,
)
from tasksapp.engine.services import JobInputError, job_cancel_waiting, job_retry
from tasksapp.engine.store import job_store
from tasksapp.schedules.fire_times import FireRuleError, fire_key, validated_cron, validated_zone
from tasksapp.schedules.models import (
    KEY_PREFIX,
    Catchup,
    Overlap,
    RunOutcome,
    Schedule,
    ScheduleRun,
)

from .errors import ScheduleInputError
from .planner import PlanSummary, schedule_job, schedule_next_fire_refresh, schedule_plan

ERR_NAME = "name must be a non-empty string of at most 100 characters."
ERR_NAME_TAKEN = "a schedule named {name!r} already exists."
ERR_CRON_XOR_EVERY = "give exactly one of cron (a cron expression) and every (a timedelta)."
ERR_EVERY = "every must be a timedelta between 1 second and 366 days."
ERR_WHEN = "{field} must be a timezone-aware datetime or None."
ERR_END_BEFORE_START = "end_at must be after start_at."
ERR_JITTER = "jitter must be a timedelta between 0 and 1 day."
ERR_CATCHUP = "catchup must be one of: {choices}."
ERR_CATCHUP_WINDOW = "catchup_window must be a timedelta between 0 and 7 days."
ERR_OVERLAP = "overlap must be one of: {choices}."
ERR_ACTIVE = "active must be true or false."
ERR_NOT_FOUND = "schedule {schedule_id} does not exist."
ERR_UNKNOWN_FIELDS = "these fields cannot be edited: {names}. Editable: {editable}."

MIN_EVERY, MAX_EVERY = dt.timedelta(seconds=1), dt.timedelta(days=366)
MAX_JITTER = dt.timedelta(days=1)
MAX_CATCHUP_WINDOW = dt.timedelta(days=7)
JOB_OPTIONS = (
    "max_attempts",
    "retry_policy",
    "delivery",
    "time_limit",
    "queue",
    "priority",
    "concurrency_key",
)
EDITABLE = (
    "name",
    "handler",
    "payload",
    "cron",
    "every",
    "timezone",
    "start_at",
    "end_at",
    "jitter",
    "catchup",
    "catchup_window",
    "overlap",
    "active",
    *JOB_OPTIONS,
)


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 100:
        raise ScheduleInputError(ERR_NAME)
    return value.strip()


def _when(field: str, value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime) or timezone.is_naive(value):
        raise ScheduleInputError(ERR_WHEN.format(field=field))
    return value


def duration_of(seconds: float | None) -> dt.timedelta | None:
    """Seconds given by a user, as the services take a duration. Beyond a timedelta's
    range (a billion days) it is that range's end, which each duration's check refuses
    with its own field's message."""
    if seconds is None:
        return None
    try:
        return dt.timedelta(seconds=seconds)
    except OverflowError:
        return dt.timedelta.max if seconds > 0 else dt.timedelta.min


def _duration(value: Any, low: dt.timedelta, high: dt.timedelta, message: str) -> dt.timedelta:
    if not isinstance(value, dt.timedelta) or not low <= value <= high:
        raise ScheduleInputError(message)
    return value


def _choice(value: Any, choices: type, message: str) -> str:
    if value not in choices.values:
        raise ScheduleInputError(message.format(choices=", ".join(choices.values)))
    return value


def _fire_rule(values: dict[str, Any]) -> dict[str, Any]:
    """cron or every, and the zone; ScheduleInputError if not exactly one is given."""
    cron, every = values.get("cron") or "", values.get("every")
    if bool(cron) == (every is not None):
        raise ScheduleInputError(ERR_CRON_XOR_EVERY)
    try:
        validated_zone(values.get("timezone", "UTC"))
        if cron:
            return {"cron": validated_cron(cron), "every": None}
    except FireRuleError as exc:
        raise ScheduleInputError(str(exc)) from exc
    return {"cron": "", "every": _duration(every, MIN_EVERY, MAX_EVERY, ERR_EVERY)}


def task_handler(handler: Any) -> Any:
    """A Django `@task` (django_tasks' Task, declared on the TempoBackend) as the name its
    jobs' handler is registered under (its dotted path); any other value unchanged. The
    task's runner takes the job's payload as `{"args": [...], "kwargs": {...}}`."""
    path = getattr(handler, "module_path", None)
    if isinstance(path, str) and callable(getattr(handler, "enqueue", None)):
        return path
    return handler


def validated_schedule(values: dict[str, Any]) -> dict[str, Any]:
    """Every field of a schedule checked (all of them given), as the model stores them."""
    values = {**values, "handler": task_handler(values["handler"])}
    try:
        validated_handler(values["handler"])
        options = JobOptions.validated(**{name: values[name] for name in JOB_OPTIONS})
        payload = validated_payload(values["payload"])
    except JobOptionsError as exc:
        raise ScheduleInputError(str(exc)) from exc
    start_at, end_at = _when("start_at", values["start_at"]), _when("end_at", values["end_at"])
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise ScheduleInputError(ERR_END_BEFORE_START)
    if not isinstance(values["active"], bool):
        raise ScheduleInputError(ERR_ACTIVE)
    return {
        "name": _name(values["name"]),
        "handler": values["handler"],
        "payload": payload,
        **_fire_rule(values),
        "timezone": values["timezone"],
        "start_at": start_at,
        "end_at": end_at,
        "jitter": _duration(values["jitter"], dt.timedelta(0), MAX_JITTER, ERR_JITTER),
        "catchup": _choice(values["catchup"], Catchup, ERR_CATCHUP),
        "catchup_window": _duration(
            values["catchup_window"], dt.timedelta(0), MAX_CATCHUP_WINDOW, ERR_CATCHUP_WINDOW
        ),
        "overlap": _choice(values["overlap"], Overlap, ERR_OVERLAP),
        "active": values["active"],
        **options.as_fields(),
    }


def schedule_create(
    *,
    name: str,
    handler: str,
    cron: str = "",
    every: dt.timedelta | None = None,
    timezone: str = "UTC",  # noqa: A002 - the schedule's field
    payload: Any = None,
    start_at: dt.datetime | None = None,
    end_at: dt.datetime | None = None,
    jitter: dt.timedelta = dt.timedelta(0),
    catchup: str = Catchup.ONE,
    catchup_window: dt.timedelta = dt.timedelta(hours=1),
    overlap: str = Overlap.ALLOW,
    active: bool = True,
    max_attempts: int = 5,
    retry_policy: dict | None = None,
    delivery: str = Delivery.TRANSACTIONAL,
    time_limit: float | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int | str = DEFAULT_PRIORITY,
    concurrency_key: str = "",
) -> Schedule:
    """A schedule, planned at once up to the horizon. Its fire times start now (or at
    `start_at`): none before its creation is caught up. `handler` is a registered
    handler's name, or a Django `@task` (its payload then `{"args": [...], "kwargs":
    {...}}`, by default none)."""
    if payload is None and task_handler(handler) is not handler:
        payload = {"args": [], "kwargs": {}}
    values = validated_schedule(
        {name: value for name, value in locals().items() if name in EDITABLE}
    )
    now = _now()
    with tempo_atomic():
        try:
            with tempo_atomic():
                schedule = Schedule.objects.create(**values, planned_until=now, created_at=now)
        except IntegrityError as exc:
            raise ScheduleInputError(ERR_NAME_TAKEN.format(name=values["name"])) from exc
        schedule_next_fire_refresh(schedule_id=schedule.id)
        schedule_plan(schedule_id=schedule.id, now=now)
    schedule.refresh_from_db()
    return schedule


def _now() -> dt.datetime:
    return timezone.now()


def _locked(schedule_id: Any) -> Schedule:
    schedule = None
    if isinstance(schedule_id, int) and not isinstance(schedule_id, bool):
        schedule = Schedule.objects.select_for_update().filter(id=schedule_id).first()
    if schedule is None:
        raise ScheduleInputError(ERR_NOT_FOUND.format(schedule_id=schedule_id))
    return schedule


def schedule_update(*, schedule_id: int, **changes: Any) -> Schedule:
    """Change the given fields; the fire times not yet planned follow the new ones (the
    jobs already planned, up to `planned_until`, stay as they are)."""
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise ScheduleInputError(
            ERR_UNKNOWN_FIELDS.format(names=", ".join(unknown), editable=", ".join(EDITABLE))
        )
    with tempo_atomic():
        schedule = _locked(schedule_id)
        current = {name: getattr(schedule, name) for name in EDITABLE}
        if "cron" in changes and changes["cron"] and "every" not in changes:
            changes["every"] = None  # a cron replaces the interval
        if "every" in changes and changes["every"] is not None and "cron" not in changes:
            changes["cron"] = ""
        values = validated_schedule(current | changes)
        try:
            with tempo_atomic():
                Schedule.objects.filter(id=schedule.id).update(**values, updated_at=_now())
        except IntegrityError as exc:
            raise ScheduleInputError(ERR_NAME_TAKEN.format(name=values["name"])) from exc
        if values["active"] and not schedule.active:
            _rearm(schedule)
        elif schedule.active and not values["active"]:
            _cancel_waiting(schedule, by="pause")
        schedule_next_fire_refresh(schedule_id=schedule.id)
        schedule_plan(schedule_id=schedule.id)
    return Schedule.objects.get(id=schedule.id)


def _cancel_waiting(schedule: Schedule, *, by: str) -> int:
    """Cancel the waiting jobs of fire times still ahead; their runs become cancelled."""
    now = _now()
    runs = ScheduleRun.objects.filter(
        schedule=schedule,
        outcome__in=[RunOutcome.PLANNED, RunOutcome.CAUGHT_UP, RunOutcome.RUN_NOW],
        job_id__isnull=False,
    )
    if by == "pause":
        runs = runs.filter(run_at__gt=now)
    cancelled = [run.id for run in runs if job_cancel_waiting(job_id=run.job_id)]
    ScheduleRun.objects.filter(id__in=cancelled).update(
        outcome=RunOutcome.CANCELLED, details={"cancelled_by": by}
    )
    return len(cancelled)


def _rearm(schedule: Schedule) -> None:
    """On resume: the runs a pause cancelled that are still ahead are scheduled again;
    fire times passed while paused are not caught up."""
    now = _now()
    runs = ScheduleRun.objects.filter(
        schedule=schedule, outcome=RunOutcome.CANCELLED, details__cancelled_by="pause"
    ).filter(run_at__gt=now)
    for run in runs:
        try:
            job_retry(job_id=run.job_id, run_at=run.run_at)
        except JobInputError:
            continue  # its job was retried or removed meanwhile
        ScheduleRun.objects.filter(id=run.id).update(outcome=RunOutcome.PLANNED, details={})
    Schedule.objects.filter(id=schedule.id, planned_until__lt=now).update(planned_until=now)


def schedule_pause(*, schedule_id: int) -> Schedule:
    """Stop planning; the waiting jobs of fire times ahead are cancelled (running ones
    finish). Pausing again changes nothing."""
    return schedule_update(schedule_id=schedule_id, active=False)


def schedule_resume(*, schedule_id: int) -> Schedule:
    """Plan again: the cancelled runs still ahead come back, later fire times are
    planned; those passed while paused are not run."""
    return schedule_update(schedule_id=schedule_id, active=True)


def schedule_run_now(*, schedule_id: int) -> ScheduleRun:
    """One extra run now, beside the fire times (the overlap policy applies to it)."""
    with tempo_atomic():
        schedule = _locked(schedule_id)
        now = _now()
        key = KEY_PREFIX.format(schedule_id=schedule.id) + "run-now:" + fire_key(now)
        inserted = job_store().insert_jobs(
            [schedule_job(schedule=schedule, fire=now, run_at=now, key=key, run_now=True)]
        )
        return ScheduleRun.objects.create(
            schedule=schedule,
            fire_at=now,
            run_at=now,
            job_id=inserted[0].id,
            outcome=RunOutcome.RUN_NOW,
        )


def schedule_delete(*, schedule_id: int) -> dict[str, Any]:
    """Delete the schedule and its runs; its waiting jobs are cancelled (running ones
    finish)."""
    with tempo_atomic():
        schedule = _locked(schedule_id)
        cancelled = _cancel_waiting(schedule, by="delete")
        name = schedule.name
        schedule.delete()
    return {"id": schedule_id, "name": name, "jobs_cancelled": cancelled}


def schedule_waiting_jobs(*, schedule: Schedule) -> int:
    """How many of its jobs wait to run."""
    ids = ScheduleRun.objects.filter(schedule=schedule, job_id__isnull=False).values("job_id")
    return Job.objects.filter(id__in=ids, state__in=DUE_STATES).count()


__all__ = [
    "PlanSummary",
    "schedule_create",
    "schedule_delete",
    "schedule_pause",
    "schedule_resume",
    "schedule_run_now",
    "schedule_update",
]
