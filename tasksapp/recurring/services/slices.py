"""The planner: one slice of one period of a recurring task into jobs, at a cost
proportional to the slice (one set-based statement), and the run that plans every slice
due (Celery beat)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.store import job_store
from tasksapp.engine.store.rows import JobTemplate, MemberSlice
from tasksapp.recurring import sql
from tasksapp.recurring.localtime import UTC_NAME
from tasksapp.recurring.models import AudienceMember, Member, RecurringTask, SlicePlan
from tasksapp.recurring.schedule import MICROSECOND, Grid
from tasksapp.recurring.selectors.schedules import recurring_task_schedule
from tasksapp.recurring.settings import planning_settings
from tasksapp.recurring.store import recurring_store

from .errors import PlanningInputError

log = logging.getLogger(__name__)

ERR_PERIOD_BEFORE = "period {period} is before the task's schedule, which starts at period {first}."
ERR_SLICE_INDEX = "slice_index must be between 0 and {last} for period {period}."


def job_key_prefix(task_id: int, period: int) -> str:
    """The idempotency key of a planned job is this prefix followed by the member's id."""
    return f"plan:{task_id}:{period}:"


def lock_active_tasks_shared() -> None:
    """Members call this before they read planned slices (see the package docstring)."""
    recurring_store().lock_active_tasks_shared()


@dataclass
class PlanningSummary:
    """What one planner run did."""

    slices: int = 0
    jobs: int = 0
    missed: int = 0
    failed_tasks: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def slice_plan(
    *, task: RecurringTask, period: int, slice_index: int, now: dt.datetime | None = None
) -> SlicePlan:
    """Plan slice `slice_index` of period `period` of `task` into jobs: one job for each
    active member whose phase lies in the slice and whose time is not older than the
    late grace (older ones are counted as missed). Done once: planning the same slice
    again returns the first plan and changes nothing."""
    now = now or timezone.now()
    with tempo_atomic():
        task = RecurringTask.objects.select_for_update().get(pk=task.pk)
        plan = SlicePlan.objects.filter(task=task, period=period, slice_index=slice_index).first()
        if plan is not None:
            return plan
        grid = _grid_for_slice(task, period, slice_index)
        starts_at, ends_at = grid.slice_window(period, slice_index)
        plan = SlicePlan.objects.create(
            task=task,
            period=period,
            slice_index=slice_index,
            slices=grid.slices,
            period_start=grid.period_start(period),
            period_length=grid.period,
            starts_at=starts_at,
            ends_at=ends_at,
        )
        began = time.perf_counter()
        grace = dt.timedelta(seconds=planning_settings().late_grace_seconds)
        plan.jobs_planned, plan.missed = plan_members(plan, not_before=now - grace)
        plan.duration_ms = (time.perf_counter() - began) * 1000
        plan.save(update_fields=["jobs_planned", "missed", "duration_ms"])
    return plan


def _grid_for_slice(task: RecurringTask, period: int, slice_index: int) -> Grid:
    schedule = recurring_task_schedule(task=task)
    if period < schedule.current.first:
        raise PlanningInputError(
            ERR_PERIOD_BEFORE.format(period=period, first=schedule.current.first)
        )
    grid = schedule.grid_for(period)
    if isinstance(slice_index, bool) or not 0 <= slice_index < grid.slices:
        raise PlanningInputError(ERR_SLICE_INDEX.format(last=grid.slices - 1, period=period))
    return grid


def plan_members(
    plan: SlicePlan,
    *,
    not_before: dt.datetime,
    member_ids: Sequence[int] | None = None,
    joined_at: dt.datetime | None = None,
) -> tuple[int, int]:
    """Insert the slice's jobs (only `member_ids`' if given; of a task with an audience,
    only the members that joined at `joined_at` if given): (planned, missed)."""
    task = plan.task
    low, high = plan.phase_bounds
    members_params = {
        "period_start": plan.period_start,
        "period_us": plan.period_length // MICROSECOND,
        "phase_from": low,
        "phase_to": high,
        "member_ids": None if member_ids is None else list(member_ids),
        "task_id": task.id,
        "joined_at": joined_at,
    }
    if task.timezone == UTC_NAME:
        members_sql = sql.MEMBER_SLICE_AUDIENCE if task.audience else sql.MEMBER_SLICE
    else:
        members_sql = sql.MEMBER_SLICE_AUDIENCE_LOCAL if task.audience else sql.MEMBER_SLICE_LOCAL
        members_params |= _regime_params(plan)
    planned = job_store().insert_jobs(
        MemberSlice(
            template=_job_template(task, plan.period),
            key_prefix=job_key_prefix(task.id, plan.period),
            not_before=not_before,
            members_sql=members_sql,
            members_params=members_params,
            members=partial(_slice_members, plan, member_ids, joined_at),
        )
    )
    return planned.planned, planned.missed


def _regime_params(plan: SlicePlan) -> dict[str, list]:
    """The period's wall-time regimes as MEMBER_SLICE_LOCAL takes them."""
    regimes = plan.regimes()
    return {
        "walls": [float(r.wall_us) for r in regimes],
        "bases": [r.base for r in regimes],
        "floors": [r.floor for r in regimes],
    }


def _job_template(task: RecurringTask, period: int) -> JobTemplate:
    """What the task's jobs of one period share; each adds its member's id."""
    return JobTemplate(
        handler=task.handler,
        payload={**task.payload, "recurring_task_id": task.id, "occurrence": period},
        max_attempts=task.max_attempts,
        retry_policy=task.retry_policy,
        delivery=task.delivery,
        time_limit=task.time_limit,
        queue=task.queue,
        priority=task.priority,
        concurrency_key=task.concurrency_key,
    )


def _slice_members(
    plan: SlicePlan, member_ids: Sequence[int] | None, joined_at: dt.datetime | None = None
) -> Iterator[tuple[int, dt.datetime]]:
    """MEMBER_SLICE through the ORM: each active member of the slice and its run time."""
    low, high = plan.phase_bounds
    if plan.task.audience:
        rows = AudienceMember.objects.filter(
            task_id=plan.task_id, active=True, phase__gte=low, phase__lt=high
        )
        if member_ids is not None:
            rows = rows.filter(member_id__in=member_ids)
        if joined_at is not None:
            rows = rows.filter(joined_at=joined_at)
        pairs = rows.values_list("member_id", "phase")
    else:
        members = Member.objects.filter(
            active=True, content_type__isnull=True, phase__gte=low, phase__lt=high
        )
        if member_ids is not None:
            members = members.filter(id__in=member_ids)
        pairs = members.values_list("id", "phase")
    for member_id, phase in pairs.iterator():
        yield member_id, plan.occurrence(phase)
