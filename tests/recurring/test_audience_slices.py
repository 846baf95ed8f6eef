"""A slice of an audience task reads its audience-member rows alone (the member's active
flag kept on them, audience_member_slice_idx): the same members as the former statement
joined to the members, the flag kept right by every path, the migration's fill, and the
plan that reads the index."""

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tasksapp.engine.models import Job, JobState
from tasksapp.recurring import sql
from tasksapp.recurring.models import AudienceMember, Member, RecurringTask, SlicePlan
from tasksapp.recurring.schedule import slice_bounds
from tasksapp.recurring.services import (
    audience_sync,
    member_activate_many,
    member_deactivate_many,
    recurring_task_create,
    slice_plan,
)

HANDLER = "tests.handlers.recording.record"
DAY = dt.timedelta(days=1)
SLICES = 24
EPOCH = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)  # ahead: nothing is missed

pytestmark = pytest.mark.django_db

# The audience slice's members as planned before migration 0025: joined to the members
# for their active flag.
FORMER_SLICE = """
    SELECT am.member_id FROM tasksapp_audiencemember am
    JOIN tasksapp_member m ON m.id = am.member_id AND m.active
    WHERE am.task_id = %(task_id)s AND am.phase >= %(low)s AND am.phase < %(high)s"""


def users(count: int, prefix: str = "user") -> list[User]:
    return User.objects.bulk_create(User(username=f"{prefix}{n}") for n in range(count))


def task(name: str, **kwargs) -> RecurringTask:
    return recurring_task_create(
        name=name,
        handler=HANDLER,
        period=DAY,
        slices=SLICES,
        epoch=EPOCH,
        audience="auth.User",
        audience_filter={"is_active": True},
        **kwargs,
    )


def member_of(user: User) -> Member:
    return Member.objects.get(object_id=str(user.pk))


def flags(user: User) -> dict[str, bool]:
    """The user's member's active flag on each task's row."""
    rows = AudienceMember.objects.filter(member__object_id=str(user.pk))
    return dict(rows.values_list("task__name", "active"))


def planned(t: RecurringTask, index: int) -> set[int]:
    jobs = Job.objects.filter(payload__recurring_task_id=t.id, payload__occurrence=0)
    plan = SlicePlan.objects.get(task=t, period=0, slice_index=index)
    low, high = plan.phase_bounds
    phases = dict(AudienceMember.objects.filter(task=t).values_list("member_id", "phase"))
    return {m for m in jobs.values_list("payload__member_id", flat=True) if low <= phases[m] < high}


def former(t: RecurringTask, index: int) -> set[int]:
    low, high = slice_bounds(index, SLICES)
    with connection.cursor() as cursor:
        cursor.execute(FORMER_SLICE, {"task_id": t.id, "low": low, "high": high})
        return {row[0] for row in cursor.fetchall()}


def test_each_slice_plans_the_members_the_former_statement_did():
    people = users(120)
    golden, random_ = task("golden"), task("random", phase_strategy="random")
    for t in (golden, random_):
        audience_sync(task=t)
    member_deactivate_many(member_ids=[member_of(u).id for u in people[:30]])
    for t in (golden, random_):
        total = 0
        for index in range(SLICES):
            plan = slice_plan(task=t, period=0, slice_index=index, now=EPOCH - DAY)
            assert planned(t, index) == former(t, index)
            total += plan.jobs_planned
        assert total == 90  # every active member once, none of the 30 inactive


def test_deactivating_and_activating_members_keep_their_rows_flag():
    people = users(5)
    first, second = task("first"), task("second")
    for t in (first, second):
        audience_sync(task=t)
    ann, bob = people[0], people[1]
    member_deactivate_many(member_ids=[member_of(ann).id])
    assert flags(ann) == {"first": False, "second": False}
    assert flags(bob) == {"first": True, "second": True}
    member_activate_many(member_ids=[member_of(ann).id])
    assert flags(ann) == {"first": True, "second": True}


def test_joining_takes_the_members_flag_and_the_slice_follows_it(
    django_capture_on_commit_callbacks,
):
    people = users(4)
    t = task("t")
    audience_sync(task=t)
    ann = people[0]
    member_deactivate_many(member_ids=[member_of(ann).id])
    # Ann leaves the audience and comes back (signals, then the pass): her member is
    # still deactivated, and so is her row in the task.
    with django_capture_on_commit_callbacks(execute=True):
        ann.is_active = False
        ann.save()
    assert flags(ann) == {}
    with django_capture_on_commit_callbacks(execute=True):
        ann.is_active = True
        ann.save()
    assert flags(ann) == {"t": False}
    User.objects.filter(pk=ann.pk).update(is_active=False)
    audience_sync(task=t)
    User.objects.filter(pk=ann.pk).update(is_active=True)
    assert audience_sync(task=t).joined == 1
    assert flags(ann) == {"t": False}
    for index in range(SLICES):
        slice_plan(task=t, period=0, slice_index=index, now=EPOCH - DAY)
    jobs = Job.objects.filter(payload__recurring_task_id=t.id)
    assert set(jobs.values_list("payload__member_id", flat=True)) == {
        member_of(u).id for u in people[1:]
    }
    # Activated again, she gets her job in period 0's slice (planned while she was away,
    # her time there still ahead), and the next period's slices plan her.
    member_activate_many(member_ids=[member_of(ann).id])
    assert flags(ann) == {"t": True}
    for index in range(SLICES):
        slice_plan(task=t, period=1, slice_index=index, now=EPOCH - DAY)
    mine = jobs.filter(payload__member_id=member_of(ann).id).order_by("payload__occurrence")
    assert list(mine.values_list("payload__occurrence", "state")) == [
        (0, JobState.SCHEDULED),
        (1, JobState.SCHEDULED),
    ]


@pytest.mark.django_db(transaction=True)
def test_the_slice_reads_the_partial_index():
    """At a population where the choice matters (3 tasks of 20,000 members each), once
    autovacuum has been by (statistics): the slice is a range of audience_member_slice_idx,
    no join to the members."""
    with connection.cursor() as cursor:
        cursor.execute(sql.INSERT_GOLDEN_MEMBERS, {"prefix": "m-", "start": 0, "stop": 20_000})
    tasks = [
        recurring_task_create(name=f"t{n}", handler=HANDLER, period=DAY, slices=SLICES)
        for n in range(3)
    ]
    with connection.cursor() as cursor:
        for t in tasks:  # audience rows as a pass leaves them, without the users behind
            cursor.execute(
                "INSERT INTO tasksapp_audiencemember (task_id, member_id, phase, joined_at)"
                " SELECT %s, id, phase, now() FROM tasksapp_member",
                [t.id],
            )
        cursor.execute("VACUUM ANALYZE tasksapp_audiencemember")
        low, high = slice_bounds(5, SLICES)
        params = {
            "period_start": EPOCH,
            "period_us": DAY // dt.timedelta(microseconds=1),
            "phase_from": low,
            "phase_to": high,
            "member_ids": None,
            "task_id": tasks[1].id,
            "joined_at": None,
        }
        cursor.execute("EXPLAIN " + sql.MEMBER_SLICE_AUDIENCE, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # A range of the index, read alone (index-only) or through its bitmap: which one
    # depends on the visibility map, which another session's open snapshot can keep from
    # being set; either reads the slice, not the population.
    scans = (
        "Index Only Scan using audience_member_slice_idx",
        "Bitmap Index Scan on audience_member_slice_idx",
    )
    assert any(scan in plan for scan in scans), plan
    assert "phase >= " in plan and "phase < " in plan, plan  # the range is the index's
    assert "tasksapp_member" not in plan, plan  # no join to the members


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_flag_and_keeps_phases_and_history():
    people = users(3)
    t = task("t")
    audience_sync(task=t)
    ann = member_of(people[0])
    member_deactivate_many(member_ids=[ann.id])
    before = sorted(
        AudienceMember.objects.values_list("task_id", "member_id", "phase", "joined_at")
    )
    ordinals = sorted(Member.objects.values_list("id", "ordinal", "phase"))
    executor = MigrationExecutor(connection)
    executor.migrate([("tasksapp", "0024_recurring_timezone")])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexname = %s", ["audience_member_phase_idx"]
        )
        assert cursor.fetchone() == (1,)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    after = sorted(AudienceMember.objects.values_list("task_id", "member_id", "phase", "joined_at"))
    assert after == before
    assert sorted(Member.objects.values_list("id", "ordinal", "phase")) == ordinals
    assert dict(AudienceMember.objects.values_list("member_id", "active")) == {
        m.id: m.id != ann.id for m in Member.objects.all()
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'tasksapp_audiencemember'"
        )
        defs = [row[0] for row in cursor.fetchall()]
    assert not any("audience_member_phase_idx" in d for d in defs)
    [slice_index] = [d for d in defs if "audience_member_slice_idx" in d]
    assert "INCLUDE (member_id) WHERE active" in slice_index
