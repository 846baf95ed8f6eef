"""Planning services against the real database: members, recurring tasks, slices."""

import datetime as dt
import threading

import pytest
import time_machine
from django.db import connection, transaction
from django.utils import timezone

from tasksapp.engine.ages import ERR_RETENTION
from tasksapp.engine.models import FINAL_STATES, Job, JobState
from tasksapp.engine.services import job_cancel
from tasksapp.engine.store import PostgresJobStore, SqliteJobStore
from tasksapp.recurring.models import FreeOrdinal, Member, RecurringTask, SlicePlan
from tasksapp.recurring.phases import golden_phase
from tasksapp.recurring.schedule import slice_of
from tasksapp.recurring.selectors.schedules import member_next_runs, recurring_task_schedule
from tasksapp.recurring.services import (
    PlanningInputError,
    member_activate,
    member_create,
    member_create_many,
    member_deactivate,
    member_delete,
    plan_due_slices,
    recurring_task_create,
    recurring_task_update,
    slice_plan,
)
from tasksapp.recurring.services import members as member_svc
from tasksapp.recurring.services import recurring_tasks as task_svc
from tasksapp.recurring.services import slices as slice_svc

HANDLER = "tests.handlers.recording.record"
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def planning(settings):
    settings.TEMPO_PLANNING = {
        "PHASE_STRATEGY": "golden",
        "HORIZON_SECONDS": 26 * 3600.0,
        "LATE_GRACE_SECONDS": 900.0,
    }
    return settings.TEMPO_PLANNING


def make_task(**fields) -> RecurringTask:
    defaults = dict(name="sync", handler=HANDLER, period=DAY, slices=4, epoch=EPOCH)
    return recurring_task_create(**{**defaults, **fields})


def members(count: int, prefix: str = "u") -> list[Member]:
    return member_create_many(external_ids=[f"{prefix}{n}" for n in range(count)])


def jobs_of(member: Member):
    return Job.objects.filter(payload__member_id=member.id)


def epoch_placing(phase: float, *, at: dt.datetime, period=DAY) -> dt.datetime:
    """An epoch that makes a member with `phase` run at `at` in period 0."""
    return at - dt.timedelta(microseconds=int(phase * (period // dt.timedelta(microseconds=1))))


pytestmark = pytest.mark.django_db


# --- members -----------------------------------------------------------------------------


def test_members_get_consecutive_ordinals_and_golden_phases(planning):
    created = members(5)
    assert [m.ordinal for m in created] == [0, 1, 2, 3, 4]
    assert [m.phase for m in created] == [golden_phase(n) for n in range(5)]
    assert Member.objects.get(external_id="u3").phase == golden_phase(3)


def test_random_strategy_gives_phases_in_the_unit_interval(settings, planning):
    settings.TEMPO_PLANNING = {**planning, "PHASE_STRATEGY": "random"}
    created = members(50)
    assert all(0 <= m.phase < 1 for m in created)
    assert len({m.phase for m in created}) == 50


def test_a_deleted_members_ordinal_and_phase_go_to_the_next_member(planning):
    created = members(4)
    before = {m.external_id: m.phase for m in Member.objects.all()}
    member_delete(member=created[1])
    assert list(FreeOrdinal.objects.values_list("ordinal", flat=True)) == [1]
    newcomer, after_it = member_create_many(external_ids=["new", "newer"])
    assert (newcomer.ordinal, newcomer.phase) == (1, golden_phase(1))
    assert after_it.ordinal == 4
    assert not FreeOrdinal.objects.exists()
    for member in Member.objects.exclude(external_id__in=["new", "newer"]):
        assert member.phase == before[member.external_id]  # nobody else moved


def test_freed_ordinals_above_every_member_are_not_handed_out_twice(planning):
    created = members(3)
    member_delete(member=created[2])
    ordinals = [m.ordinal for m in member_create_many(external_ids=["a", "b", "c"])]
    assert ordinals == [2, 3, 4]


def test_duplicate_external_ids_are_refused_with_the_names(planning):
    members(2)
    with pytest.raises(PlanningInputError) as exc:
        member_create(external_id="u1")
    assert str(exc.value) == member_svc.ERR_MEMBER_EXISTS.format(ids="u1")
    with pytest.raises(PlanningInputError) as exc:
        member_create_many(external_ids=["x", "y", "x"])
    assert str(exc.value) == member_svc.ERR_EXTERNAL_ID_TWICE.format(ids="x")
    with pytest.raises(PlanningInputError, match="external_id must be a non-empty string"):
        member_create(external_id=" ")
    assert Member.objects.count() == 2


# --- recurring tasks ---------------------------------------------------------------------


def test_create_stores_the_normalised_task(planning):
    task = make_task(payload={"service": "foo"}, retry_policy={"delays": [1, 2]})
    assert task.retry_policy == {"delays": [1.0, 2.0]}
    assert (task.period, task.slices, task.first_period, task.next_from) == (DAY, 4, 0, None)


def test_the_epoch_defaults_to_today_at_midnight_utc(planning):
    noon = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    with time_machine.travel(noon, tick=True):  # never across midnight
        task = recurring_task_create(name="t", handler=HANDLER, period=DAY)
        assert task.epoch == timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"period": dt.timedelta(seconds=59)}, task_svc.ERR_PERIOD),
        ({"period": 86400}, task_svc.ERR_PERIOD),
        ({"slices": 0}, task_svc.ERR_SLICES),
        ({"slices": True}, task_svc.ERR_SLICES),
        (
            {"period": HOUR, "slices": 61},
            task_svc.ERR_SLICE_LENGTH.format(period=HOUR, slices=61, length=HOUR / 61),
        ),
        ({"epoch": dt.datetime(2026, 1, 1)}, task_svc.ERR_EPOCH),
        ({"payload": [1, 2]}, task_svc.ERR_PAYLOAD_OBJECT),
        ({"name": ""}, task_svc.ERR_NAME),
        ({"active": "yes"}, task_svc.ERR_ACTIVE),
        (
            {
                "period": dt.timedelta(minutes=1),
                "slices": 1,
                "retry_policy": {"delays": [30]},
                "max_attempts": 3,
            },
            task_svc.ERR_RETRY_WORST_CASE.format(period=60, worst=60, attempts=3),
        ),
    ],
)
def test_create_refuses_bad_input_with_a_clear_message(planning, fields, message):
    with pytest.raises(PlanningInputError) as exc:
        make_task(**fields)
    assert str(exc.value) == message
    assert not RecurringTask.objects.exists()


@pytest.mark.parametrize(
    "retention", [{"running": 3}, {"dead": 0}, {"dead": True}, {"dead": "7"}, [7], {"lost": 1e9}]
)
def test_retention_ages_are_checked_and_a_refusal_changes_nothing(planning, retention):
    task = make_task(retention={"dead": 60})
    for attempt in (
        lambda: make_task(name="other", retention=retention),
        lambda: recurring_task_update(task=task, retention=retention),
    ):
        with pytest.raises(PlanningInputError) as exc:
            attempt()
        assert str(exc.value) == ERR_RETENTION.format(states=", ".join(FINAL_STATES))
    task.refresh_from_db()
    assert task.retention == {"dead": 60.0}
    assert RecurringTask.objects.count() == 1
    assert recurring_task_update(task=task, retention={}).retention == {}


def test_create_refuses_an_unknown_handler_and_a_taken_name(planning):
    with pytest.raises(PlanningInputError, match="is not registered"):
        make_task(handler="tests.handlers.recording.nothing_here")
    make_task()
    with pytest.raises(PlanningInputError) as exc:
        make_task()
    assert str(exc.value) == task_svc.ERR_TASK_EXISTS.format(name="sync")


def test_the_worst_case_includes_the_time_limit_of_every_attempt(planning):
    with pytest.raises(PlanningInputError, match="must exceed the retry policy's worst case"):
        make_task(
            period=dt.timedelta(minutes=2),
            slices=1,
            retry_policy={"delays": [1]},
            max_attempts=3,
            time_limit=40,
        )


# --- planning slices ---------------------------------------------------------------------


def test_slice_plan_plans_exactly_the_members_of_the_slice(planning):
    created = members(40)
    task = make_task(
        payload={"service": "foo"},
        retry_policy={"delays": [5]},
        max_attempts=2,
        delivery="at_least_once",
        time_limit=30,
    )
    now = task.epoch - DAY
    plan = slice_plan(task=task, period=3, slice_index=1, now=now)
    inside = {m.id for m in created if slice_of(m.phase, 4) == 1}
    jobs = list(Job.objects.all())
    assert {j.payload["member_id"] for j in jobs} == inside
    assert (plan.jobs_planned, plan.missed) == (len(inside), 0)
    schedule = recurring_task_schedule(task=task)
    for job in jobs:
        member = Member.objects.get(id=job.payload["member_id"])
        assert job.run_at == schedule.occurrence(3, member.phase)
        assert plan.starts_at <= job.run_at <= plan.ends_at
        assert job.payload == {
            "service": "foo",
            "member_id": member.id,
            "recurring_task_id": task.id,
            "occurrence": 3,
        }
        assert job.idempotency_key == f"plan:{task.id}:3:{member.id}"
        assert (job.state, job.handler, job.max_attempts, job.delivery, job.time_limit) == (
            JobState.SCHEDULED,
            HANDLER,
            2,
            "at_least_once",
            30.0,
        )
        assert job.retry_policy == {"delays": [5.0]}


@pytest.mark.parametrize("store", [PostgresJobStore, SqliteJobStore])
def test_planned_jobs_take_the_tasks_route_with_a_key_per_member(planning, monkeypatch, store):
    monkeypatch.setattr(slice_svc, "job_store", store)
    created = members(12)
    task = make_task(queue="sync", priority="high", concurrency_key="sync:{member}")
    slice_plan(task=task, period=3, slice_index=1, now=task.epoch - DAY)
    jobs = list(Job.objects.all())
    assert jobs and {m.id for m in created} >= {j.payload["member_id"] for j in jobs}
    for job in jobs:
        assert (job.queue, job.priority) == ("sync", 7)
        assert job.concurrency_key == f"sync:{job.payload['member_id']}"


def test_a_bad_route_of_a_task_is_refused(planning):
    with pytest.raises(PlanningInputError, match="queue must be"):
        make_task(queue="No Such")
    with pytest.raises(PlanningInputError, match="priority must be"):
        make_task(priority=12)
    assert not RecurringTask.objects.exists()


def test_planning_a_slice_again_changes_nothing(planning):
    members(20)
    task = make_task()
    first = slice_plan(task=task, period=0, slice_index=2, now=task.epoch)
    count = Job.objects.count()
    again = slice_plan(task=task, period=0, slice_index=2, now=task.epoch)
    assert again.pk == first.pk and Job.objects.count() == count
    assert SlicePlan.objects.count() == 1


def test_inactive_members_are_not_planned(planning):
    created = members(8)
    for member in created:
        member_deactivate(member=member)
    task = make_task(slices=1)
    assert slice_plan(task=task, period=0, slice_index=0, now=task.epoch).jobs_planned == 0


def test_times_older_than_the_grace_are_missed_newer_ones_run_late(planning):
    created = members(30)
    task = make_task(slices=1)
    now = task.epoch + dt.timedelta(hours=12)
    plan = slice_plan(task=task, period=0, slice_index=0, now=now)
    cutoff = now - dt.timedelta(seconds=900)
    run_at = {m.id: task.epoch + dt.timedelta(days=m.phase) for m in created}
    missed = {i for i, when in run_at.items() if when < cutoff - dt.timedelta(seconds=1)}
    assert plan.missed == len(missed) > 0
    assert not Job.objects.filter(payload__member_id__in=missed).exists()
    assert plan.jobs_planned == 30 - plan.missed


def test_slice_plan_refuses_slices_outside_the_schedule(planning):
    task = make_task()
    with pytest.raises(PlanningInputError) as exc:
        slice_plan(task=task, period=0, slice_index=4)
    assert str(exc.value) == slice_svc.ERR_SLICE_INDEX.format(last=3, period=0)
    with pytest.raises(PlanningInputError) as exc:
        slice_plan(task=task, period=-1, slice_index=0)
    assert str(exc.value) == slice_svc.ERR_PERIOD_BEFORE.format(period=-1, first=0)
    assert not SlicePlan.objects.exists()


def test_plan_due_slices_plans_the_horizon_once(planning):
    members(12)
    task = make_task()
    now = task.epoch + dt.timedelta(days=2, hours=7)
    summary = plan_due_slices(now=now)
    keys = list(
        SlicePlan.objects.order_by("period", "slice_index").values_list("period", "slice_index")
    )
    # horizon 26 h from 07:00: the rest of day 2 and day 3 up to 09:00 (its slice 1).
    assert keys == [(2, 1), (2, 2), (2, 3), (3, 0), (3, 1)]
    assert summary.slices == 5 and summary.jobs == Job.objects.count() > 0
    again = plan_due_slices(now=now + HOUR)
    assert (again.slices, again.jobs) == (0, 0)


def test_plan_due_slices_skips_what_ended_during_an_outage(planning):
    members(12)
    task = make_task()
    plan_due_slices(now=task.epoch)
    later = task.epoch + dt.timedelta(days=5, hours=13)
    plan_due_slices(now=later)
    periods = set(SlicePlan.objects.values_list("period", flat=True))
    assert periods == {0, 1, 5, 6}
    assert not SlicePlan.objects.filter(period=5, slice_index__lt=2).exists()


def test_inactive_tasks_are_not_planned(planning):
    members(3)
    make_task(active=False)
    assert plan_due_slices().slices == 0


# --- members joining and leaving planned slices -----------------------------------------


def test_a_member_created_after_its_slice_was_planned_is_scheduled_if_still_ahead(planning):
    members(10)
    now = timezone.now()
    ahead = make_task(name="ahead", slices=1, epoch=epoch_placing(golden_phase(10), at=now + HOUR))
    gone = make_task(name="gone", slices=1, epoch=epoch_placing(golden_phase(10), at=now - HOUR))
    plan_due_slices(now=now)
    newcomer = member_create(external_id="late")
    assert newcomer.phase == golden_phase(10)
    planned = {
        (j.payload["recurring_task_id"], j.payload["occurrence"]): j.run_at
        for j in jobs_of(newcomer)
    }
    # Period 1 of both tasks is planned too (26 h horizon); period 0 of `gone` has passed.
    assert set(planned) == {(ahead.id, 0), (ahead.id, 1), (gone.id, 1)}
    assert planned[(ahead.id, 0)] == now + HOUR
    assert planned[(gone.id, 1)] == now - HOUR + DAY


def test_deleting_a_member_cancels_its_waiting_jobs_only(planning):
    created = members(10)
    task = make_task(slices=1, epoch=timezone.now() - HOUR)
    plan_due_slices()
    victim, other = created[3], created[4]
    waiting = list(jobs_of(victim))
    assert waiting and all(j.state == JobState.SCHEDULED for j in waiting)
    assert member_delete(member=victim) == len(waiting)
    assert {j.state for j in jobs_of(victim)} == {JobState.CANCELLED}
    assert {j.state for j in jobs_of(other)} == {JobState.SCHEDULED}
    assert task.slice_plans.count() == 2


def test_deleting_a_member_leaves_its_claimed_job_alone(planning):
    created = members(3)
    make_task(slices=1, epoch=timezone.now() - HOUR)
    plan_due_slices()
    job = jobs_of(created[1]).order_by("run_at").first()
    Job.objects.filter(id=job.id).update(state=JobState.CLAIMED)
    member_delete(member=created[1])
    assert Job.objects.get(id=job.id).state == JobState.CLAIMED


def test_deactivating_cancels_and_activating_schedules_again(planning):
    created = members(6)
    make_task(slices=1, epoch=timezone.now() - HOUR)
    plan_due_slices()
    member = created[2]
    ahead = {j.id: j.run_at for j in jobs_of(member) if j.run_at > timezone.now()}
    assert ahead
    member_deactivate(member=member)
    assert {j.state for j in jobs_of(member)} == {JobState.CANCELLED}
    member_activate(member=member)
    assert Member.objects.get(id=member.id).active
    again = {j.id: j.run_at for j in jobs_of(member).filter(state=JobState.SCHEDULED)}
    assert again == ahead  # the same jobs, at the same times
    assert set(jobs_of(member).values_list("state", flat=True)) <= {
        JobState.SCHEDULED,
        JobState.CANCELLED,
    }


def test_next_runs_agree_with_the_planned_jobs(planning):
    created = members(10)
    task = make_task(slices=2, epoch=timezone.now() - 3 * DAY)
    plan_due_slices()
    for member in created:
        planned = sorted(j.run_at for j in jobs_of(member) if j.run_at >= timezone.now())
        runs = member_next_runs(member=member, task=task, count=len(planned))
        assert runs[: len(planned)] == planned[: len(runs)]


# --- changing a task ---------------------------------------------------------------------


def test_job_options_change_for_slices_planned_afterwards(planning):
    members(8)
    task = make_task(slices=2)
    slice_plan(task=task, period=0, slice_index=0, now=task.epoch)
    task = recurring_task_update(task=task, payload={"v": 2}, max_attempts=3)
    slice_plan(task=task, period=0, slice_index=1, now=task.epoch)
    assert {j.max_attempts for j in Job.objects.filter(payload__v=2)} == {3}
    assert not Job.objects.filter(max_attempts=3).exclude(payload__v=2).exists()


def test_a_new_period_waits_for_the_boundary_after_the_planned_slices(planning):
    members(20)
    task = make_task()
    now = task.epoch + dt.timedelta(days=2, hours=7)
    plan_due_slices(now=now)  # plans up to period 3
    task = recurring_task_update(task=task, period=2 * DAY, slices=2, now=now)
    assert (task.next_from, task.next_period, task.next_slices) == (4, 2 * DAY, 2)
    assert (task.period, task.slices) == (DAY, 4)
    plan_due_slices(now=now + DAY)
    plan_due_slices(now=now + 2 * DAY)
    plans = SlicePlan.objects.filter(period__gte=3).order_by("period", "slice_index")
    assert [(p.period, p.slice_index, p.slices) for p in plans] == [
        (3, 0, 4),
        (3, 1, 4),
        (3, 2, 4),
        (3, 3, 4),
        (4, 0, 2),
        (4, 1, 2),
    ]
    switch = plans.get(period=4, slice_index=0)
    assert switch.period_start == task.epoch + 4 * DAY and switch.period_length == 2 * DAY
    for member in Member.objects.all():  # one run per period, around the switch too
        times = sorted(j.run_at for j in jobs_of(member).filter(payload__occurrence__gte=3))
        assert len(times) == 2 and DAY <= times[1] - times[0] <= 2 * DAY


def test_a_pending_change_is_replaced_or_withdrawn(planning):
    task = make_task()
    now = task.epoch + dt.timedelta(days=2, hours=7)
    task = recurring_task_update(task=task, period=2 * DAY, now=now)
    assert (task.next_from, task.next_period) == (3, 2 * DAY)
    task = recurring_task_update(task=task, slices=8, now=now)
    assert (task.next_from, task.next_period, task.next_slices) == (3, 2 * DAY, 8)
    task = recurring_task_update(task=task, period=DAY, slices=4, now=now)
    assert (task.next_from, task.period, task.slices) == (None, DAY, 4)


def test_a_change_that_took_effect_becomes_the_schedule(planning):
    task = make_task()
    now = task.epoch + dt.timedelta(days=2, hours=7)
    task = recurring_task_update(task=task, period=2 * DAY, now=now)
    later = now + 3 * DAY
    task = recurring_task_update(task=task, slices=1, now=later)
    assert (task.epoch, task.first_period, task.period) == (EPOCH + 3 * DAY, 3, 2 * DAY)
    # Period 4 (days 5 and 6) has begun by `later`: the new slice count starts with 5.
    assert (task.next_from, task.next_period, task.next_slices) == (5, 2 * DAY, 1)


def test_the_epoch_changes_only_before_the_first_plan(planning):
    task = make_task()
    moved = task.epoch + HOUR
    task = recurring_task_update(task=task, epoch=moved)
    assert task.epoch == moved
    slice_plan(task=task, period=0, slice_index=0, now=task.epoch)
    with pytest.raises(PlanningInputError) as exc:
        recurring_task_update(task=task, epoch=moved + HOUR)
    assert str(exc.value) == task_svc.ERR_EPOCH_PLANNED
    assert RecurringTask.objects.get(id=task.id).epoch == moved


def test_update_refuses_a_period_the_retries_do_not_fit(planning):
    task = make_task(slices=1, retry_policy={"delays": [20]}, max_attempts=4)
    with pytest.raises(PlanningInputError, match="must exceed the retry policy's worst case"):
        recurring_task_update(task=task, period=dt.timedelta(minutes=1))
    assert RecurringTask.objects.get(id=task.id).next_from is None


def test_update_can_pause_a_task(planning):
    task = recurring_task_update(task=make_task(), active=False)
    assert not RecurringTask.objects.get(id=task.id).active


# --- concurrency -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_member_created_while_its_slice_is_being_planned_gets_its_job(planning):
    """The planner holds its task row; the new member waits for the plan, then sees it."""
    members(5)
    now = timezone.now()
    task = make_task(slices=1, epoch=epoch_placing(golden_phase(5), at=now + HOUR))
    planning_started, creation_done = threading.Event(), threading.Event()

    def create_member():
        try:
            planning_started.wait(5)
            member_create(external_id="racer")
        finally:
            connection.close()
            creation_done.set()

    creator = threading.Thread(target=create_member)
    creator.start()
    with transaction.atomic():
        slice_plan(task=task, period=0, slice_index=0, now=now)
        planning_started.set()
        assert not creation_done.wait(0.5)  # blocked by the planner's lock
    creator.join(5)
    racer = Member.objects.get(external_id="racer")
    [job] = jobs_of(racer)
    assert job.run_at == recurring_task_schedule(task=task).occurrence(0, racer.phase)


@pytest.mark.django_db(transaction=True)
def test_a_slice_planned_while_a_member_is_being_created_includes_it(planning):
    """The new member holds its share of the task row; the planner waits, then sees it."""
    members(5)
    now = timezone.now()
    task = make_task(slices=1, epoch=epoch_placing(golden_phase(5), at=now + HOUR))
    planned = threading.Event()

    def plan():
        try:
            slice_plan(task=task, period=0, slice_index=0, now=now)
        finally:
            connection.close()
            planned.set()

    planner = threading.Thread(target=plan)
    with transaction.atomic():
        racer = member_create(external_id="racer")
        planner.start()
        assert not planned.wait(0.5)  # blocked by the member's lock
    planner.join(5)
    [job] = jobs_of(racer)
    assert job.run_at == now + HOUR


def test_cancelled_job_keys_are_never_planned_twice(planning):
    created = members(4)
    task = make_task(slices=1, epoch=timezone.now() - HOUR)
    plan_due_slices()
    job = jobs_of(created[0]).order_by("run_at").last()
    job_cancel(job_id=job.id)
    SlicePlan.objects.filter(task=task).delete()
    plan_due_slices()
    assert jobs_of(created[0]).filter(payload__occurrence=job.payload["occurrence"]).count() == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="compares with PostgreSQL's")
@pytest.mark.parametrize("only_some", [False, True], ids=["slice", "some-members"])
def test_the_orm_store_plans_the_same_jobs_as_the_statement(planning, monkeypatch, only_some):
    created = members(60)
    task = make_task(slices=2, payload={"service": "foo"}, time_limit=30)
    plan = SlicePlan.objects.create(
        task=task,
        period=0,
        slice_index=0,
        slices=2,
        period_start=task.epoch,
        period_length=DAY,
        starts_at=task.epoch,
        ends_at=task.epoch + DAY / 2,
    )
    chosen = [m.id for m in created[::3]] if only_some else None
    not_before = task.epoch + dt.timedelta(hours=5)  # the earliest members are missed

    def planned_with(store):
        monkeypatch.setattr(slice_svc, "job_store", lambda: store)
        counts = slice_svc.plan_members(plan, not_before=not_before, member_ids=chosen)
        fields = ("idempotency_key", "run_at", "payload", "retry_policy", "time_limit", "state")
        jobs = sorted(Job.objects.values_list(*fields))
        Job.objects.all().delete()
        return counts, jobs

    by_statement = planned_with(PostgresJobStore())
    assert by_statement[0][0] > 0 and by_statement[0][1] > 0
    assert planned_with(SqliteJobStore()) == by_statement
