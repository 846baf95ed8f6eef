"""Reads for the dashboard's recurring-task pages: one period of a task drawn as its
slices (planned or not, the current one, members per slice against the even share),
the load of its planned jobs over the period, and a member's next runs.

Costs: one grouped range scan of the members' partial index on `phase`, one of the jobs'
`(handler, run_at)` index over the period, and the task's slice plans of the period.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Count, Max
from django.utils import timezone

from tasksapp.recurring.models import AudienceMember, Member, RecurringTask, SlicePlan
from tasksapp.recurring.schedule import Grid
from tasksapp.recurring.selectors.schedules import member_next_runs, recurring_task_schedule
from tasksapp.recurring.store import recurring_store

LOAD_BUCKETS = 96  # points on the load curve of one period
NEXT_RUNS = 5


@dataclass(frozen=True)
class TaskRow:
    task: RecurringTask
    planned_slices: int
    last_planned: SlicePlan | None
    current_period: int
    pending_change: str
    audience_size: int | None = None  # members now, for a task with an audience


def recurring_task_list(*, now: dt.datetime | None = None) -> list[TaskRow]:
    """Every recurring task with its latest planned slice and a waiting change, if any."""
    now = now or timezone.now()
    tasks = list(RecurringTask.objects.order_by("name"))
    counts = dict(
        SlicePlan.objects.values_list("task")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("task", "n")
    )
    sizes = dict(
        AudienceMember.objects.filter(member__active=True)
        .values_list("task")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("task", "n")
    )
    rows = []
    for task in tasks:
        schedule = recurring_task_schedule(task=task)
        last = SlicePlan.objects.filter(task=task).order_by("-period", "-slice_index").first()
        change = ""
        if schedule.pending is not None:
            change = (
                f"from period {schedule.pending.first}: {schedule.pending.period} "
                f"in {schedule.pending.slices} slices"
            )
        grid = schedule.grid_at(now)
        size = sizes.get(task.id, 0) if task.audience else None
        row = TaskRow(task, counts.get(task.id, 0), last, grid.period_at(now), change, size)
        rows.append(row)
    return rows


@dataclass
class SliceView:
    index: int
    starts_at: dt.datetime
    ends_at: dt.datetime
    planned: bool
    current: bool
    members: int  # active members whose phase lies in the slice, now
    expected: float  # the even share: active members / slices
    jobs_planned: int | None = None
    missed: int | None = None
    planned_at: dt.datetime | None = None


@dataclass
class PlanView:
    task: RecurringTask
    period: int
    grid: Grid
    period_start: dt.datetime
    period_end: dt.datetime
    now: dt.datetime
    slices: list[SliceView]
    active_members: int
    load_starts: list[dt.datetime] = field(default_factory=list)
    load_counts: list[int] = field(default_factory=list)
    load_planned: list[bool] = field(default_factory=list)  # each part lies in a planned slice
    current_slice: int | None = None
    first_period: int = 0
    last_planned_period: int | None = None

    @property
    def planned_count(self) -> int:
        return sum(1 for s in self.slices if s.planned)

    @property
    def jobs_in_period(self) -> int:
        return sum(self.load_counts)

    @property
    def load_mean(self) -> float | None:
        """Jobs per part over the parts of planned slices only (the others have no jobs
        yet: counting them would pull the mean down); None when no slice is planned."""
        counts = [
            n for n, planned in zip(self.load_counts, self.load_planned, strict=False) if planned
        ]
        return sum(counts) / len(counts) if counts else None


def recurring_task_plan(
    *, task: RecurringTask, period: int | None = None, now: dt.datetime | None = None
) -> PlanView:
    """Period `period` (default: the one running now) of `task`, slice by slice."""
    now = now or timezone.now()
    schedule = recurring_task_schedule(task=task)
    if period is None:
        period = max(schedule.grid_at(now).period_at(now), schedule.current.first)
    period = max(period, schedule.current.first)
    grid = schedule.grid_for(period)
    start, end = grid.period_start(period), grid.period_start(period + 1)
    plans = {p.slice_index: p for p in SlicePlan.objects.filter(task=task, period=period)}
    per_slice = _members_per_slice(grid.slices, task)
    active = sum(per_slice.values())
    current = grid.slice_at(period, now)
    slices = []
    for index in range(grid.slices):
        low, high = grid.slice_window(period, index)
        plan = plans.get(index)
        slices.append(
            SliceView(
                index=index,
                starts_at=low,
                ends_at=high,
                planned=plan is not None,
                current=index == current,
                members=per_slice.get(index, 0),
                expected=active / grid.slices,
                jobs_planned=plan.jobs_planned if plan else None,
                missed=missed_while_task_existed(plan, task) if plan else None,
                planned_at=plan.planned_at if plan else None,
            )
        )
    view = PlanView(task, period, grid, start, end, now, slices, active, current_slice=current)
    view.first_period = schedule.current.first
    view.last_planned_period = SlicePlan.objects.filter(task=task).aggregate(p=Max("period"))["p"]
    view.load_starts, view.load_counts = _job_load(task.handler, start, end)
    view.load_planned = [
        _in_planned_slice(view, at + (end - start) / LOAD_BUCKETS / 2) for at in view.load_starts
    ]
    return view


def _in_planned_slice(view: PlanView, moment: dt.datetime) -> bool:
    index = view.grid.slice_at(view.period, moment)
    return index is not None and view.slices[index].planned


def missed_while_task_existed(plan: SlicePlan, task: RecurringTask) -> int:
    """The plan's missed members less those whose time in the slice came before the
    task was created: they were never due (a task created a moment ago has missed none,
    though its first slice began earlier)."""
    if not plan.missed or plan.starts_at >= task.created_at:
        return plan.missed
    if plan.ends_at <= task.created_at:
        return 0
    low, _ = plan.phase_bounds
    grid = Grid(plan.period_start, plan.period, plan.period_length, plan.slices, task.timezone)
    created = grid.phase_at(plan.period, task.created_at)
    return max(plan.missed - _members_between(task, low, created), 0)


def _members_between(task: RecurringTask, low: float, high: float) -> int:
    """Active members of the task whose phase is in [low, high) (the phase index)."""
    if task.audience:
        members = AudienceMember.objects.filter(task=task, member__active=True)
    else:
        members = Member.objects.filter(active=True, content_type__isnull=True)
    return members.filter(phase__gte=low, phase__lt=high).count()


def _members_per_slice(slices: int, task: RecurringTask) -> dict[int, int]:
    task_id = task.id if task.audience else None
    return recurring_store().members_per_slice(slices, task_id=task_id)


def _job_load(
    handler: str, start: dt.datetime, end: dt.datetime
) -> tuple[list[dt.datetime], list[int]]:
    """Jobs of `handler` due in [start, end), in LOAD_BUCKETS equal parts of it."""
    width = (end - start) / LOAD_BUCKETS
    load = recurring_store().job_load(
        handler=handler, start=start, width=width, buckets=LOAD_BUCKETS
    )
    starts = [start + width * i for i in range(LOAD_BUCKETS)]
    return starts, [load.get(i, 0) for i in range(LOAD_BUCKETS)]


def member_runs_for_task(
    *, task: RecurringTask, external_id: str, now: dt.datetime | None = None
) -> tuple[Member | None, list[dt.datetime]]:
    """The member with `external_id` and its next runs of `task` (empty if inactive)."""
    member = Member.objects.filter(external_id=external_id).first()
    if member is None:
        return None, []
    return member, member_next_runs(member=member, task=task, count=NEXT_RUNS, after=now)
