"""The planner run (Celery beat): every active task's due slices planned in order, each
audience task's members brought up to date with its audience first."""

from __future__ import annotations

import datetime as dt
import logging

from django.utils import timezone

from tasksapp.recurring.models import RecurringTask
from tasksapp.recurring.selectors.schedules import recurring_task_schedule, slice_plan_last_key
from tasksapp.recurring.settings import planning_settings

from .audiences import audience_sync
from .slices import PlanningSummary, slice_plan

log = logging.getLogger(__name__)


def plan_due_slices(*, now: dt.datetime | None = None) -> PlanningSummary:
    """The planner run (Celery beat): for every active task, plan in order each slice
    not planned yet that starts before now + horizon. Slices that ended longer than the
    late grace ago (the planner was down) are skipped, never run in a burst. A failing
    task is logged and retried on the next run; the others go on."""
    now = now or timezone.now()
    summary = PlanningSummary()
    for task in RecurringTask.objects.filter(active=True).order_by("id"):
        try:
            _plan_task(task, now=now, summary=summary)
        except Exception:  # whatever it is (a bad stored date too), the other tasks go on
            log.exception("planning task %s failed; the next run tries again", task.name)
            summary.failed_tasks.append(task.name)
    return summary


def _plan_task(task: RecurringTask, *, now: dt.datetime, summary: PlanningSummary) -> None:
    cfg = planning_settings()
    if task.audience:  # members follow the audience before its slices are planned
        audience_sync(task=task, now=now)
    schedule = recurring_task_schedule(task=task)
    last = slice_plan_last_key(task=task)
    not_before = now - dt.timedelta(seconds=cfg.late_grace_seconds)
    if last is not None and schedule.first_slice_ending_after(not_before) > schedule.next_slice(
        last
    ):
        log.warning(
            "task %s: slices after %s ended unplanned; their members missed a run",
            task.name,
            tuple(last),
        )
    until = now + dt.timedelta(seconds=cfg.horizon_seconds)
    for key in schedule.slices_to_plan(last=last, not_before=not_before, until=until):
        plan = slice_plan(task=task, period=key.period, slice_index=key.index, now=now)
        summary.slices += 1
        summary.jobs += plan.jobs_planned
        summary.missed += plan.missed
