"""Members of audience tasks deactivated, activated and deleted by the batch services,
beside a task without audience: each member's planned jobs are found in every task
through its own phase in that task (shifted or random), and nothing else changes. Both
recurring stores (the named statements, and the ORM form of the embedded mode) run
against the real database."""

import datetime as dt

import pytest
from django.contrib.auth.models import User

from tasksapp.engine.models import Job, JobState
from tasksapp.recurring import phases
from tasksapp.recurring.models import AudienceMember, Member, RecurringTask, SlicePlan
from tasksapp.recurring.schedule import slice_of
from tasksapp.recurring.services import (
    MemberBatch,
    audience_sync,
    member_activate_many,
    member_create_many,
    member_deactivate_many,
    member_delete_many,
    recurring_task_create,
    slice_plan,
)
from tasksapp.recurring.services import members as member_svc
from tasksapp.recurring.store import PostgresRecurringStore, SqliteRecurringStore

HANDLER = "tests.handlers.recording.record"
DAY = dt.timedelta(days=1)
SLICES = 24
HALF = range(SLICES // 2)  # the slices planned first: phases below 0.5
EPOCH = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)  # ahead: every planned slice is open
PLANNED_AT = EPOCH - DAY

pytestmark = pytest.mark.django_db


@pytest.fixture(params=[PostgresRecurringStore, SqliteRecurringStore])
def store(request, monkeypatch):
    monkeypatch.setattr(member_svc, "recurring_store", request.param)
    return request.param


def task(name: str, **kwargs) -> RecurringTask:
    return recurring_task_create(
        name=name, handler=HANDLER, period=DAY, slices=SLICES, epoch=EPOCH, **kwargs
    )


def audience_task(name: str, **kwargs) -> RecurringTask:
    return task(name, audience="auth.User", audience_filter={"is_active": True}, **kwargs)


def plan(t: RecurringTask, period: int, indexes) -> None:
    for index in indexes:
        slice_plan(task=t, period=period, slice_index=index, now=PLANNED_AT)


def jobs() -> dict[tuple[int, int, int], tuple[str, dt.datetime, int]]:
    """Every job by (task, period, member): its state, run time and id."""
    rows = Job.objects.values_list(
        "payload__recurring_task_id",
        "payload__occurrence",
        "payload__member_id",
        "state",
        "run_at",
        "id",
    )
    return {(t, k, m): (state, run_at, pk) for t, k, m, state, run_at, pk in rows}


def phase_in(t: RecurringTask, member: Member) -> float:
    if not t.audience:
        return member.phase
    return AudienceMember.objects.get(task=t, member=member).phase


def expected_run(t: RecurringTask, period: int, member: Member) -> dt.datetime:
    phase = phase_in(t, member)
    found = SlicePlan.objects.select_related("task").get(
        task=t, period=period, slice_index=slice_of(phase, SLICES)
    )
    return found.occurrence(phase)


@pytest.fixture
def world():
    """Two audience tasks (golden phases shifted by half a period, and random) and a task
    without audience, the first half of period 0 of each planned; `ann` an audience
    member whose phase in both audience tasks is in the planned half and whose own phase
    is not, `pat` a plain member planned in the plain task."""
    User.objects.bulk_create(User(username=f"user{n}") for n in range(60))
    plain = member_create_many(external_ids=[f"p{n}" for n in range(20)])
    golden, random_ = audience_task("golden"), audience_task("random", phase_strategy="random")
    RecurringTask.objects.filter(pk=golden.pk).update(phase_shift=0.5)
    golden.refresh_from_db()
    plain_task = task("plain")
    for t in (golden, random_):
        audience_sync(task=t)
    tasks = (golden, random_, plain_task)
    for t in tasks:
        plan(t, 0, HALF)
    in_half = slice_of(0.5, SLICES) - 1  # the last slice planned
    ann = next(
        m
        for m in Member.objects.filter(content_type__isnull=False).order_by("id")
        if slice_of(m.phase, SLICES) > in_half + 1
        and all(slice_of(phase_in(t, m), SLICES) < in_half for t in (golden, random_))
    )
    pat = next(m for m in plain if slice_of(m.phase, SLICES) < in_half)
    return tasks, ann, pat


def test_deactivating_cancels_the_planned_jobs_in_every_task_and_nothing_else(store, world):
    (golden, random_, plain_task), ann, pat = world
    before = jobs()
    theirs = {(golden.id, 0, ann.id), (random_.id, 0, ann.id), (plain_task.id, 0, pat.id)}
    assert theirs <= before.keys()
    assert member_deactivate_many(member_ids=[ann.id, pat.id]) == MemberBatch(members=2, jobs=3)
    after = jobs()
    assert after.keys() == before.keys()
    for key in theirs:
        assert after[key][0] == JobState.CANCELLED
    assert {k: v for k, v in after.items() if k not in theirs} == {
        k: v for k, v in before.items() if k not in theirs
    }


def test_activating_plans_each_member_once_in_every_open_slice_at_its_phase_there(store, world):
    tasks, ann, pat = world
    member_deactivate_many(member_ids=[ann.id, pat.id])
    for t in tasks:  # planned while they were away: the rest of period 0, half of period 1
        plan(t, 0, range(SLICES // 2, SLICES))
        plan(t, 1, HALF)
    before = jobs()
    done = member_activate_many(member_ids=[ann.id, pat.id])
    assert done == MemberBatch(members=2, jobs=6)  # 3 scheduled again, 3 created
    after = jobs()
    for t in tasks:
        member = pat if t.name == "plain" else ann
        for period in (0, 1):
            state, run_at, _ = after[(t.id, period, member.id)]
            assert (state, run_at) == (JobState.SCHEDULED, expected_run(t, period, member))
        assert after[(t.id, 0, member.id)][2] == before[(t.id, 0, member.id)][2]  # the same job
    mine = {k for k in after if k[2] in (ann.id, pat.id)}
    assert len(mine) == 6  # once per task and period, in no other task
    assert {k: v for k, v in after.items() if k not in mine} == {
        k: v for k, v in before.items() if k not in mine
    }


def test_deleting_cancels_the_planned_jobs_in_every_task_and_the_next_pass_brings_it_back(
    store, world
):
    (golden, random_, plain_task), ann, pat = world
    before = jobs()
    assert member_delete_many(member_ids=[ann.id, pat.id]) == MemberBatch(members=2, jobs=3)
    after = jobs()
    theirs = {(golden.id, 0, ann.id), (random_.id, 0, ann.id), (plain_task.id, 0, pat.id)}
    assert {k for k, v in after.items() if v[0] == JobState.CANCELLED} == theirs
    assert not Member.objects.filter(id__in=[ann.id, pat.id]).exists()
    assert not AudienceMember.objects.filter(member_id=ann.id).exists()
    # Its object is still in the audience: the next pass makes it a member again, with
    # the lowest ordinal freed (and its golden phase).
    assert audience_sync(task=golden).joined == 1
    again = Member.objects.get(object_id=ann.object_id)
    assert again.ordinal == min(ann.ordinal, pat.ordinal)
    assert again.phase == phases.golden_phase(again.ordinal)
    assert before.keys() <= jobs().keys()
