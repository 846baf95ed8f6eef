"""Recurring tasks: what runs for every member once per period, and how a change of
period or slice count is scheduled so that no member runs twice or is skipped."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from django.db import IntegrityError
from django.utils import timezone

from tasksapp.engine.db import database_vendor, on_postgres, tempo_atomic
from tasksapp.engine.jsonvalues import JsonValueError, checked_text
from tasksapp.engine.models import Delivery
from tasksapp.engine.options import (
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    JobOptions,
    JobOptionsError,
    validated_handler,
    validated_payload,
    validated_retention,
)
from tasksapp.engine.retry import worst_case_seconds
from tasksapp.recurring import localtime, phases
from tasksapp.recurring.audiences import AudienceError, validated_audience
from tasksapp.recurring.models import RecurringTask, SlicePlan
from tasksapp.recurring.schedule import Grid, Schedule
from tasksapp.recurring.selectors.schedules import recurring_task_schedule, slice_plan_last_key

from .errors import PlanningInputError

ERR_NAME = "name must be a non-empty string of at most 100 characters."
ERR_TASK_EXISTS = "a recurring task named {name!r} already exists."
ERR_PAYLOAD_OBJECT = "payload must be a JSON object: it is merged into every job's payload."
ERR_PERIOD = "period must be a timedelta between 1 minute and 366 days."
ERR_SLICES = "slices must be an integer between 1 and 10000."
ERR_SLICE_LENGTH = "a slice must last at least 1 minute: {period} in {slices} slices is {length}."
ERR_EPOCH = "epoch must be a timezone-aware datetime."
ERR_EPOCH_RANGE = (
    "epoch must lie between {earliest} and {latest} (from 1970 to at most {future_years}"
    " years ahead)."
)
ERR_EPOCH_PLANNED = (
    "epoch cannot change once a slice is planned: every member's time would move, so some "
    "would run twice in a period and others not at all. Create a new task instead."
)
ERR_RETRY_WORST_CASE = (
    "period ({period:g} s) must exceed the retry policy's worst case ({worst:g} s over "
    "{attempts} attempts): an occurrence could still be retrying when the next one is due."
)
ERR_ACTIVE = "active must be true or false."
ERR_PHASE_STRATEGY = "phase_strategy must be one of: {choices} (got {value!r})."
ERR_ALIGN_WITH = "align_with must be another recurring task with an audience, for a task with one."
ERR_ALIGN_RANDOM = "tasks run aligned share golden-ratio phases: both need phase_strategy 'golden'."
ERR_AUDIENCE_SWITCH = (
    "a task cannot gain or lose its audience once created (its members and phases would "
    "change under the slices already planned): create a new task instead."
)
ERR_AUDIENCE_DATABASE = "audiences need PostgreSQL (the database here is {vendor})."
ERR_TIMEZONE = "timezone must be an IANA time zone name such as 'Europe/Berlin' (got {value!r})."
ERR_TIMEZONE_DAYS = (
    "a task with a time zone ({zone}) follows its calendar days: its period must be whole "
    "days (got {period})."
)

MIN_PERIOD = dt.timedelta(minutes=1)
MAX_PERIOD = dt.timedelta(days=366)
MIN_SLICE = dt.timedelta(minutes=1)
MAX_SLICES = 10_000
# Epochs are bounded as jobs' run times are (at most ten years ahead): every period
# start and occurrence the planner and the pages compute stays far from the calendar's
# ends (an epoch of 9999-12-31 overflowed the first slice's window).
EPOCH_EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
EPOCH_FUTURE_YEARS = 10
EPOCH_FUTURE = dt.timedelta(days=365 * EPOCH_FUTURE_YEARS + 3)


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()


def recurring_task_create(
    *,
    name: str,
    handler: str,
    period: dt.timedelta,
    slices: int = 1,
    epoch: dt.datetime | None = None,
    payload: dict | None = None,
    max_attempts: int = 5,
    retry_policy: dict | None = None,
    delivery: str = Delivery.TRANSACTIONAL,
    time_limit: float | None = None,
    active: bool = True,
    queue: str = DEFAULT_QUEUE,
    priority: int | str = DEFAULT_PRIORITY,
    concurrency_key: str = "",
    retention: dict | None = None,
    audience: str = "",
    audience_filter: dict | None = None,
    phase_strategy: str = phases.GOLDEN,
    align_with: RecurringTask | None = None,
    timezone: str = localtime.UTC_NAME,
) -> RecurringTask:
    """A task run once per `period` for every active member, at the member's phase,
    planned in `slices` slices per period. Period 0 starts at `epoch` (default: today,
    00:00 UTC). `retention`: days its finished jobs are kept, per state (docs/OPERATIONS.md).

    With an `audience` (a model label and `audience_filter`, or a registered @audience
    function) it runs for the members standing for the audience's objects instead, each
    at its own phase in this task: `phase_strategy` "golden" (the member's phase shifted
    by the task's own golden-ratio offset) or "random"; `align_with` another audience
    task to share its phases. Its members join at the first sync (audience_sync).

    With a `timezone` other than "UTC" (an IANA name) the period must be whole days: each
    period starts at local midnight (period 0 on the epoch's local date, default today's)
    and lasts that many local calendar days, 23 or 25 hours across a DST change, and a
    member keeps its local time of day (docs/PLANNING.md)."""
    _validated_name(name)
    zone = _validated_zone(timezone)
    audience, audience_filter = _validated_audience(audience, audience_filter)
    strategy = _validated_strategy(phase_strategy, audience=audience, align_with=align_with)
    options = _validated_task_options(
        handler=handler,
        payload=payload,
        max_attempts=max_attempts,
        retry_policy=retry_policy,
        delivery=delivery,
        time_limit=time_limit,
        queue=queue,
        priority=priority,
        concurrency_key=concurrency_key,
    )
    epoch = _today(zone) if epoch is None else _validated_epoch(epoch)
    period, slices = _validated_grid(period, slices, zone=zone)
    grid = Grid(_period_zero(epoch, zone), 0, period, slices, zone)
    _check_retries_fit(Schedule(grid), options)
    if not isinstance(active, bool):
        raise PlanningInputError(ERR_ACTIVE)
    ages = _validated_retention(retention)
    try:
        with tempo_atomic():
            task = RecurringTask.objects.create(
                name=name,
                epoch=grid.start,
                timezone=zone,
                period=grid.period,
                slices=grid.slices,
                active=active,
                retention=ages,
                audience=audience,
                audience_filter=audience_filter,
                phase_strategy=strategy,
                aligned_with=align_with,
                **options,
            )
            if audience:  # tasks spread apart; tasks without one keep the shared phase
                task.phase_shift = (
                    align_with.phase_shift if align_with else phases.task_shift(task.pk)
                )
                task.save(update_fields=["phase_shift"])
            return task
    except IntegrityError as exc:
        raise PlanningInputError(ERR_TASK_EXISTS.format(name=name)) from exc


def recurring_task_update(
    *,
    task: RecurringTask,
    handler: str = UNCHANGED,
    payload: dict = UNCHANGED,
    max_attempts: int = UNCHANGED,
    retry_policy: dict = UNCHANGED,
    delivery: str = UNCHANGED,
    time_limit: float | None = UNCHANGED,
    queue: str = UNCHANGED,
    priority: int | str = UNCHANGED,
    concurrency_key: str = UNCHANGED,
    period: dt.timedelta = UNCHANGED,
    slices: int = UNCHANGED,
    epoch: dt.datetime = UNCHANGED,
    active: bool = UNCHANGED,
    retention: dict = UNCHANGED,
    audience: str = UNCHANGED,
    audience_filter: dict = UNCHANGED,
    now: dt.datetime | None = None,
) -> RecurringTask:
    """Change a task. Job options apply to slices planned from now on. A new period or
    slice count takes effect at the first period boundary that is in the future and
    after every planned slice (docs/PLANNING.md); the epoch can change only while no
    slice is planned. A task's audience or filter may change (not be added or removed):
    the next pass (audience_sync) moves its members. New retention ages apply to the
    task's finished jobs at the next
    retention run, old ones included."""
    now = now or timezone.now()
    ages = UNCHANGED if retention is UNCHANGED else _validated_retention(retention)
    given = dict(
        handler=handler,
        payload=payload,
        max_attempts=max_attempts,
        retry_policy=retry_policy,
        delivery=delivery,
        time_limit=time_limit,
        queue=queue,
        priority=priority,
        concurrency_key=concurrency_key,
    )
    with tempo_atomic():
        task = RecurringTask.objects.select_for_update().get(pk=task.pk)
        options = _validated_task_options(
            **{
                key: getattr(task, key) if value is UNCHANGED else value
                for key, value in given.items()
            }
        )
        schedule = recurring_task_schedule(task=task)
        if epoch is not UNCHANGED:
            schedule = _with_epoch(task, schedule, epoch)
        if period is not UNCHANGED or slices is not UNCHANGED:
            schedule = _with_grid(task, schedule, period=period, slices=slices, now=now)
        _check_retries_fit(schedule, options)
        if active is not UNCHANGED and not isinstance(active, bool):
            raise PlanningInputError(ERR_ACTIVE)
        if ages is not UNCHANGED:
            task.retention = ages
        if audience is not UNCHANGED or audience_filter is not UNCHANGED:
            _change_audience(task, audience, audience_filter)
        _store(task, schedule, options, active=task.active if active is UNCHANGED else active)
    return task


def _validated_audience(audience: Any, audience_filter: Any) -> tuple[str, dict]:
    try:
        label, filters = validated_audience(audience, audience_filter)
    except AudienceError as exc:
        raise PlanningInputError(str(exc)) from exc
    if label and not on_postgres():
        raise PlanningInputError(ERR_AUDIENCE_DATABASE.format(vendor=database_vendor()))
    return label, filters


def _change_audience(task: RecurringTask, audience: Any, audience_filter: Any) -> None:
    """A task with an audience may take another one (or another filter): the next pass
    moves its members. A task cannot gain or lose its audience: its members and phases
    would change under the slices already planned."""
    label = task.audience if audience is UNCHANGED else audience
    filters = task.audience_filter if audience_filter is UNCHANGED else audience_filter
    if not task.audience or not label:
        raise PlanningInputError(ERR_AUDIENCE_SWITCH)
    task.audience, task.audience_filter = _validated_audience(label, filters)


def _validated_strategy(strategy: Any, *, audience: str, align_with: Any) -> str:
    if strategy not in phases.STRATEGIES:
        choices = ", ".join(phases.STRATEGIES)
        raise PlanningInputError(ERR_PHASE_STRATEGY.format(choices=choices, value=strategy))
    if align_with is None:
        return strategy
    if not isinstance(align_with, RecurringTask) or not align_with.audience or not audience:
        raise PlanningInputError(ERR_ALIGN_WITH)
    if strategy != phases.GOLDEN or align_with.phase_strategy != phases.GOLDEN:
        raise PlanningInputError(ERR_ALIGN_RANDOM)
    return strategy


def _validated_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise PlanningInputError(ERR_NAME)
    try:
        return checked_text(name, what="name")
    except JsonValueError as exc:
        raise PlanningInputError(str(exc)) from exc


def _validated_task_options(*, handler: Any, payload: Any, **job_options: Any) -> dict[str, Any]:
    """The handler, payload and job options every planned job gets, as task fields."""
    try:
        validated_handler(handler)
        options = JobOptions.validated(**job_options)
        payload = validated_payload(payload)
    except JobOptionsError as exc:
        raise PlanningInputError(str(exc)) from exc
    if not isinstance(payload, dict):
        raise PlanningInputError(ERR_PAYLOAD_OBJECT)
    return {"handler": handler, "payload": payload, **options.as_fields()}


def _validated_retention(retention: Any) -> dict[str, float]:
    try:
        return validated_retention(retention)
    except JobOptionsError as exc:
        raise PlanningInputError(str(exc)) from exc


def _validated_zone(value: Any) -> str:
    if not isinstance(value, str) or value not in localtime.zone_names() | {localtime.UTC_NAME}:
        raise PlanningInputError(ERR_TIMEZONE.format(value=value))
    return value


def _period_zero(epoch: dt.datetime, zone: str) -> dt.datetime:
    """Where period 0 starts: the epoch, or for a zoned task its local date's midnight."""
    if zone == localtime.UTC_NAME:
        return epoch
    return localtime.local_midnight(localtime.local_date(epoch, zone), zone)


def _validated_grid(
    period: Any, slices: Any, *, zone: str = localtime.UTC_NAME
) -> tuple[dt.timedelta, int]:
    if not isinstance(period, dt.timedelta) or not MIN_PERIOD <= period <= MAX_PERIOD:
        raise PlanningInputError(ERR_PERIOD)
    if zone != localtime.UTC_NAME and period % localtime.DAY:
        raise PlanningInputError(ERR_TIMEZONE_DAYS.format(zone=zone, period=period))
    if isinstance(slices, bool) or not isinstance(slices, int) or not 1 <= slices <= MAX_SLICES:
        raise PlanningInputError(ERR_SLICES)
    if period / slices < MIN_SLICE:
        raise PlanningInputError(
            ERR_SLICE_LENGTH.format(period=period, slices=slices, length=period / slices)
        )
    return period, slices


def _validated_epoch(epoch: Any) -> dt.datetime:
    if not isinstance(epoch, dt.datetime) or timezone.is_naive(epoch):
        raise PlanningInputError(ERR_EPOCH)
    latest = timezone.now() + EPOCH_FUTURE
    if not EPOCH_EARLIEST <= epoch <= latest:
        raise PlanningInputError(
            ERR_EPOCH_RANGE.format(
                earliest=EPOCH_EARLIEST.isoformat(timespec="seconds"),
                latest=latest.isoformat(timespec="seconds"),
                future_years=EPOCH_FUTURE_YEARS,
            )
        )
    return epoch


def _today(zone: str) -> dt.datetime:
    """00:00 UTC today; for a zoned task, today's local midnight in its zone."""
    now = timezone.now()
    if zone != localtime.UTC_NAME:
        return localtime.local_midnight(localtime.local_date(now, zone), zone)
    return now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _check_retries_fit(schedule: Schedule, options: dict[str, Any]) -> None:
    attempts = options["max_attempts"]
    worst = worst_case_seconds(options["retry_policy"], max_attempts=attempts)
    worst += (options["time_limit"] or 0.0) * attempts
    for grid in filter(None, (schedule.current, schedule.pending)):
        shortest = grid.shortest_period().total_seconds()
        if worst >= shortest:
            raise PlanningInputError(
                ERR_RETRY_WORST_CASE.format(period=shortest, worst=worst, attempts=attempts)
            )


def _with_epoch(task: RecurringTask, schedule: Schedule, epoch: Any) -> Schedule:
    current = schedule.current
    start = _period_zero(_validated_epoch(epoch), current.zone)
    if start == current.start:
        return schedule
    if SlicePlan.objects.filter(task=task).exists():
        raise PlanningInputError(ERR_EPOCH_PLANNED)
    return Schedule(replace(current, start=start), schedule.pending)


def _with_grid(
    task: RecurringTask, schedule: Schedule, *, period: Any, slices: Any, now: dt.datetime
) -> Schedule:
    latest = schedule.latest
    period, slices = _validated_grid(
        latest.period if period is UNCHANGED else period,
        latest.slices if slices is UNCHANGED else slices,
        zone=latest.zone,
    )
    if (period, slices) == (latest.period, latest.slices):
        return schedule
    last = slice_plan_last_key(task=task)
    settled = schedule.settled(last=last, now=now)
    if (period, slices) == (settled.current.period, settled.current.slices):
        return settled
    return settled.changed(
        at=settled.change_period(last=last, now=now), period=period, slices=slices
    )


def _store(task: RecurringTask, schedule: Schedule, options: dict[str, Any], *, active: bool):
    current, pending = schedule.current, schedule.pending
    task.epoch, task.first_period = current.start, current.first
    task.period, task.slices = current.period, current.slices
    task.next_from = pending.first if pending else None
    task.next_period = pending.period if pending else None
    task.next_slices = pending.slices if pending else None
    task.active = active
    for key, value in options.items():
        setattr(task, key, value)
    task.save()
