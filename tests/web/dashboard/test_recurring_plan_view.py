"""The recurring task page's numbers: a slice's missed members count only those whose
time passed while the task existed; the load chart's mean is over planned slices."""

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.recurring.models import RecurringTask, SlicePlan
from tasksapp.recurring.selectors.plans import (
    LOAD_BUCKETS,
    _members_between,
    recurring_task_plan,
)
from tasksapp.recurring.services import member_create_many, recurring_task_create, slice_plan
from tests.web.dashboard.fixtures import HANDLER

pytestmark = pytest.mark.django_db
MIDNIGHT = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
HOUR = dt.timedelta(hours=1)


@pytest.fixture
def task():
    member_create_many(external_ids=[f"m{i}" for i in range(480)])
    return recurring_task_create(
        name="hourly sync", handler=HANDLER, period=dt.timedelta(days=1), slices=24, epoch=MIDNIGHT
    )


def created(task, at: dt.datetime) -> RecurringTask:
    RecurringTask.objects.filter(id=task.id).update(created_at=at)
    return RecurringTask.objects.get(id=task.id)


def shown_missed(task, slice_index: int, now: dt.datetime) -> int:
    return recurring_task_plan(task=task, period=0, now=now).slices[slice_index].missed


def test_a_task_created_a_moment_ago_has_missed_nobody(task):
    """Created at 01:40 and planned at once: the members of 01:00-01:40 were stored as
    missed, but their time came before the task existed."""
    task = created(task, MIDNIGHT + 100 * dt.timedelta(minutes=1))
    now = task.created_at + dt.timedelta(seconds=1)
    plan = slice_plan(task=task, period=0, slice_index=1, now=now)
    assert plan.missed > 0  # what the planner stored
    assert shown_missed(task, 1, now) == 0


def test_only_the_members_due_after_the_creation_count_as_missed(task):
    task = created(task, MIDNIGHT + 80 * dt.timedelta(minutes=1))  # 01:20
    now = MIDNIGHT + 100 * dt.timedelta(minutes=1)  # planned late, at 01:40
    plan = slice_plan(task=task, period=0, slice_index=1, now=now)
    before = _members_between(task, 1 / 24, 80 / 1440)
    assert plan.missed > before > 0
    assert shown_missed(task, 1, now) == plan.missed - before


def test_a_slice_over_before_the_task_existed_has_missed_nobody(task):
    plan = slice_plan(task=task, period=0, slice_index=1, now=MIDNIGHT + 3 * HOUR)
    task = created(task, MIDNIGHT + 3 * HOUR)
    assert plan.missed > 0 and shown_missed(task, 1, MIDNIGHT + 3 * HOUR) == 0
    # A task older than the slice: the stored count as it is.
    task = created(task, MIDNIGHT - HOUR)
    assert shown_missed(task, 1, MIDNIGHT + 3 * HOUR) == plan.missed


def test_tomorrows_load_mean_is_over_its_planned_slices(task):
    now = MIDNIGHT + 23 * HOUR
    for index in range(6):  # tomorrow's first six slices of 24
        slice_plan(task=task, period=1, slice_index=index, now=now)
    view = recurring_task_plan(task=task, period=1, now=now)
    per_slice = LOAD_BUCKETS // 24
    assert view.load_planned == [True] * 6 * per_slice + [False] * 18 * per_slice
    planned_counts = view.load_counts[: 6 * per_slice]
    assert sum(planned_counts) == sum(
        p.jobs_planned for p in SlicePlan.objects.filter(task=task, period=1)
    )
    assert view.load_mean == sum(planned_counts) / len(planned_counts)
    assert view.load_mean > sum(view.load_counts) / LOAD_BUCKETS  # the old, pulled-down one


def test_no_planned_slice_no_mean(task):
    view = recurring_task_plan(task=task, period=3, now=MIDNIGHT)
    assert view.load_mean is None and not any(view.load_planned)
