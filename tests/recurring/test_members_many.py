"""Members leaving and coming back by the batch (member_delete_many, member_deactivate_many,
member_activate_many) against the real database, with both recurring stores: the named
statements of PostgreSQL and the ORM form the embedded SQLite mode runs."""

import datetime as dt
import math

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.recurring.models import FreeOrdinal, Member, SlicePlan
from tasksapp.recurring.schedule import slice_of
from tasksapp.recurring.services import (
    MemberBatch,
    PlanningInputError,
    member_activate_many,
    member_create_many,
    member_deactivate_many,
    member_delete,
    member_delete_many,
    plan_due_slices,
    recurring_task_create,
)
from tasksapp.recurring.services import members as member_svc
from tasksapp.recurring.store import PostgresRecurringStore, SqliteRecurringStore

HANDLER = "tests.handlers.recording.record"
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
WAITING = {JobState.SCHEDULED, JobState.FAILED}

pytestmark = pytest.mark.django_db


@pytest.fixture(params=[PostgresRecurringStore, SqliteRecurringStore])
def store(request, monkeypatch, settings):
    settings.TEMPO_PLANNING = {
        "PHASE_STRATEGY": "golden",
        "HORIZON_SECONDS": 26 * 3600.0,
        "LATE_GRACE_SECONDS": 900.0,
    }
    monkeypatch.setattr(member_svc, "recurring_store", request.param)
    return request.param


def members(count: int, prefix: str = "u") -> list[Member]:
    return member_create_many(external_ids=[f"{prefix}{n}" for n in range(count)])


def task(name: str, *, slices: int, epoch: dt.datetime | None = None):
    epoch = epoch or timezone.now() - HOUR
    return recurring_task_create(name=name, handler=HANDLER, period=DAY, slices=slices, epoch=epoch)


def states(member_ids) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for member_id, state in Job.objects.filter(payload__member_id__in=list(member_ids)).values_list(
        "payload__member_id", "state"
    ):
        found.setdefault(member_id, set()).add(state)
    return found


def test_deleting_many_cancels_their_waiting_jobs_in_every_slice_and_frees_ordinals(store):
    created = members(40)
    task("a", slices=4)
    task("b", slices=7)
    plan_due_slices()
    gone, kept = created[::3], [m for m in created if m not in created[::3]]
    waiting = Job.objects.filter(payload__member_id__in=[m.id for m in gone], state__in=WAITING)
    expected = waiting.count()
    assert expected >= 2 * len(gone)  # both tasks, this period and the next
    result = member_delete_many(member_ids=[m.id for m in gone])
    assert result == MemberBatch(members=len(gone), jobs=expected)
    assert not Member.objects.filter(id__in=[m.id for m in gone]).exists()
    assert set(FreeOrdinal.objects.values_list("ordinal", flat=True)) == {m.ordinal for m in gone}
    assert all(found == {JobState.CANCELLED} for found in states(m.id for m in gone).values())
    assert all(found == {JobState.SCHEDULED} for found in states(m.id for m in kept).values())


def test_a_claimed_job_runs_and_ids_not_found_are_skipped(store):
    created = members(5)
    task("a", slices=1)
    plan_due_slices()
    claimed = Job.objects.filter(payload__member_id=created[0].id).order_by("run_at").first()
    Job.objects.filter(id=claimed.id).update(state=JobState.CLAIMED)
    failed = Job.objects.filter(payload__member_id=created[1].id).order_by("run_at").first()
    Job.objects.filter(id=failed.id).update(state=JobState.FAILED)
    missing = Member.objects.order_by("-id").first().id + 1000
    result = member_delete_many(member_ids=[created[0].id, created[1].id, missing])
    assert result.members == 2
    assert Job.objects.get(id=claimed.id).state == JobState.CLAIMED
    assert Job.objects.get(id=failed.id).state == JobState.CANCELLED  # a retry waiting


def test_a_phase_on_a_slice_bound_finds_its_slice(store):
    """floor(phase × slices) may name the slice above the one slice_bounds gives: the
    statement looks at the neighbours and checks the exact bounds."""
    member, other = members(2)
    phase = math.nextafter(5 / 6, 0)
    assert int(phase * 6) == 5 and slice_of(phase, 6) == 4
    Member.objects.filter(id=member.id).update(phase=phase)
    task("six", slices=6, epoch=timezone.now() - dt.timedelta(hours=2))
    plan_due_slices()
    assert states([member.id]) == {member.id: {JobState.SCHEDULED}}
    planned = Job.objects.filter(payload__member_id=member.id).count()
    assert member_delete_many(member_ids=[member.id]).jobs == planned
    assert states([member.id, other.id]) == {
        member.id: {JobState.CANCELLED},
        other.id: {JobState.SCHEDULED},
    }


def test_deactivating_and_activating_many_cancels_then_restores_and_plans_what_was_missed(store):
    created = members(30)
    now = timezone.now()
    task("a", slices=4, epoch=now - HOUR)
    plan_due_slices(now=now)
    away = created[:12]
    ids = [m.id for m in away]
    ahead = set(
        Job.objects.filter(payload__member_id__in=ids, run_at__gt=timezone.now()).values_list(
            "id", flat=True
        )
    )
    assert member_deactivate_many(member_ids=ids).members == len(away)
    assert all(found == {JobState.CANCELLED} for found in states(ids).values())
    assert member_deactivate_many(member_ids=ids) == MemberBatch()  # inactive already
    later = task("b", slices=5, epoch=now - HOUR)  # planned while they are away
    plan_due_slices(now=now)
    of_later = Job.objects.filter(payload__member_id__in=ids, payload__recurring_task_id=later.id)
    assert not of_later.exists()
    result = member_activate_many(member_ids=ids)
    assert result.members == len(away)
    restored = set(
        Job.objects.filter(payload__member_id__in=ids, state=JobState.SCHEDULED).values_list(
            "id", flat=True
        )
    )
    assert ahead <= restored  # the same jobs again, and task b's created
    assert restored - ahead == set(of_later.values_list("id", flat=True)) != set()
    assert result.jobs == len(restored)
    assert set(Member.objects.filter(id__in=ids).values_list("active", flat=True)) == {True}


def test_a_batch_costs_the_same_statements_whatever_the_slices_and_members(store):
    created = members(60)
    task("few", slices=2)
    plan_due_slices()
    counts = []
    with CaptureQueriesContext(connection) as one:
        member_delete_many(member_ids=[created[0].id])
    counts.append(len(one))
    task("many", slices=48)
    plan_due_slices()
    assert SlicePlan.objects.count() > 50
    for action in (member_deactivate_many, member_activate_many, member_delete_many):
        with CaptureQueriesContext(connection) as batch:
            action(member_ids=[m.id for m in created[1:40]])
        counts.append(len(batch))
    if store is PostgresRecurringStore:  # lock, statement, and the savepoint's two
        assert counts == [4, 4, 4, 4]  # activation: nothing missing, nothing inserted
    else:  # reads and writes of its own, as many for one member as for 39
        assert counts[0] == counts[3]


def test_more_ids_than_one_statement_takes_go_in_chunks(store, monkeypatch):
    monkeypatch.setattr(member_svc, "MEMBER_CHUNK", 4)
    created = members(10)
    task("a", slices=3)
    plan_due_slices()
    expected = Job.objects.filter(state__in=WAITING).count()
    result = member_delete_many(member_ids=[m.id for m in reversed(created)])
    assert result == MemberBatch(members=10, jobs=expected)
    assert not Member.objects.exists()


@pytest.mark.parametrize(
    "bad",
    [[], ["1"], [True], [0], [2**63], [1.0], "12", None, list(range(1, 100_002))],
)
def test_bad_ids_are_refused_and_change_nothing(store, bad):
    created = members(3)
    task("a", slices=1)
    plan_due_slices()
    before = sorted(Job.objects.values_list("id", "state"))
    for action in (member_delete_many, member_deactivate_many, member_activate_many):
        with pytest.raises(PlanningInputError) as exc:
            action(member_ids=bad)
        assert str(exc.value) == member_svc.ERR_MEMBER_IDS
    assert Member.objects.filter(active=True).count() == len(created)
    assert sorted(Job.objects.values_list("id", "state")) == before


def test_the_single_call_is_a_batch_of_one(store):
    created = members(4)
    task("a", slices=2)
    plan_due_slices()
    waiting = Job.objects.filter(payload__member_id=created[2].id, state__in=WAITING).count()
    assert waiting and member_delete(member=created[2]) == waiting
    assert FreeOrdinal.objects.get().ordinal == created[2].ordinal
