"""Reads for probabilistic planning: a task's schedule, its planned slices, and when a
member runs next (computed, without touching the jobs table)."""

from __future__ import annotations

import datetime as dt

from django.db.models import DateTimeField, ExpressionWrapper, F
from django.utils import timezone

from tasksapp.recurring.models import AudienceMember, Member, RecurringTask, SlicePlan
from tasksapp.recurring.schedule import Grid, Schedule, SliceKey


def recurring_task_schedule(*, task: RecurringTask) -> Schedule:
    """The task's grid, and the change waiting for a later period, if any."""
    current = Grid(task.epoch, task.first_period, task.period, task.slices, task.timezone)
    if task.next_from is None:
        return Schedule(current)
    pending = Grid(
        current.period_start(task.next_from),
        task.next_from,
        task.next_period,
        task.next_slices,
        task.timezone,
    )
    return Schedule(current, pending)


def slice_plan_last_key(*, task: RecurringTask) -> SliceKey | None:
    """The latest slice planned for the task."""
    row = (
        SlicePlan.objects.filter(task=task)
        .order_by("-period", "-slice_index")
        .values_list("period", "slice_index")
        .first()
    )
    return SliceKey(*row) if row else None


def slice_plan_list(*, task: RecurringTask, limit: int = 50) -> list[SlicePlan]:
    """The task's most recent slice plans, latest first."""
    return list(SlicePlan.objects.filter(task=task).order_by("-period", "-slice_index")[:limit])


def slice_plans_open(*, phase: float | None = None, now: dt.datetime) -> list[SlicePlan]:
    """Planned slices of active tasks whose window has not ended (a member created now
    may still have its time ahead in them); only those containing `phase` if given."""
    plans = SlicePlan.objects.filter(task__active=True, ends_at__gt=now).select_related("task")
    return [plan for plan in plans if phase is None or plan.contains(phase)]


def slice_plans_with_pending_jobs(*, phase: float, now: dt.datetime) -> list[SlicePlan]:
    """Planned slices containing `phase` whose jobs may still wait or retry: a job is
    retried within one period of its run time (recurring_task_create enforces it)."""
    until = ExpressionWrapper(F("ends_at") + F("period_length"), output_field=DateTimeField())
    plans = SlicePlan.objects.alias(until=until).filter(until__gt=now)
    return [plan for plan in plans if plan.contains(phase)]


def member_next_runs(
    *, member: Member, task: RecurringTask, count: int = 3, after: dt.datetime | None = None
) -> list[dt.datetime]:
    """When `member` runs next for `task`: its occurrence times from `after` (default
    now) on, by the formula. Empty while the member or the task is inactive."""
    if not (member.active and task.active):
        return []
    phase = member.phase
    if task.audience:  # its own phase in the task, while the member is in the audience
        phase = (
            AudienceMember.objects.filter(task=task, member=member)
            .values_list("phase", flat=True)
            .first()
        )
        if phase is None:
            return []
    elif member.content_type_id is not None:
        return []  # an audience's member: tasks without an audience do not run for it
    schedule = recurring_task_schedule(task=task)
    return schedule.next_runs(phase, after=after or timezone.now(), count=count)
