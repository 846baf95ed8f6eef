"""Audiences: a recurring task over the host's own objects (auth users here), its
members following the audience through the set-based pass, against the real database."""

import datetime as dt

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone

from tasksapp.engine.handlers import JobCancelled, JobContext
from tasksapp.engine.models import Job, JobState
from tasksapp.recurring import phases
from tasksapp.recurring.audiences import audience, audience_unregister
from tasksapp.recurring.models import AudienceMember, Member, RecurringTask
from tasksapp.recurring.services import (
    PlanningInputError,
    audience_sync,
    member_create_many,
    plan_due_slices,
    recurring_task_create,
    recurring_task_update,
)
from tasksapp.recurring.services.audiences import REASON_LEFT

HANDLER = "tests.handlers.recording.record"
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _planning(settings):
    settings.TEMPO_PLANNING = {
        "PHASE_STRATEGY": "golden",
        "HORIZON_SECONDS": 26 * 3600.0,
        "LATE_GRACE_SECONDS": 900.0,
    }


def users(count: int, prefix: str = "user", **fields) -> list[User]:
    return User.objects.bulk_create(User(username=f"{prefix}{n}", **fields) for n in range(count))


def task(name: str = "t", **kwargs) -> RecurringTask:
    kwargs.setdefault("audience", "auth.User")
    kwargs.setdefault("audience_filter", {"is_active": True})
    return recurring_task_create(
        name=name,
        handler=HANDLER,
        period=DAY,
        slices=24,
        epoch=timezone.now() - HOUR * 3,
        **kwargs,
    )


def members_of(task: RecurringTask) -> set[str]:
    return set(AudienceMember.objects.filter(task=task).values_list("member__object_id", flat=True))


def jobs_of(task: RecurringTask) -> dict[int, str]:
    rows = Job.objects.filter(payload__recurring_task_id=task.id)
    return dict(rows.values_list("payload__member_id", "state"))


@pytest.mark.parametrize(
    ("audience_", "filter_", "message"),
    [
        ("auth.Nope", {}, "audience must be an installed model's label"),
        ("nodots", None, "audience must be an installed model's label"),
        ("auth.User", {"no_such_field": 1}, "audience_filter must be a JSON object of field"),
        ("auth.User", {"groups__nope": "x"}, "audience_filter must be a JSON object of field"),
        ("auth.User", {"id": "not a number"}, "audience_filter must be a JSON object of field"),
        ("auth.User", ["is_active"], "audience_filter must be a JSON object of field"),
        ("", {"is_active": True}, "audience_filter needs an audience."),
    ],
)
def test_bad_audience_is_refused_and_stores_nothing(audience_, filter_, message):
    with pytest.raises(PlanningInputError) as caught:
        task(audience=audience_, audience_filter=filter_)
    assert str(caught.value).startswith(message)
    assert not RecurringTask.objects.exists()


def test_bad_phase_strategy_is_refused():
    with pytest.raises(PlanningInputError, match="phase_strategy must be one of"):
        task(phase_strategy="uniform")
    assert not RecurringTask.objects.exists()


def test_filter_through_relations_and_registered_function():
    beta = Group.objects.create(name="beta")
    alice, bob, _ = users(3)
    alice.groups.add(beta)

    @audience(name="tests.staff_users")
    def staff_users():
        return User.objects.filter(is_staff=True)

    try:
        by_group = task("by-group", audience_filter={"groups__name": "beta"})
        bob.is_staff = True
        bob.save()
        by_function = task("by-function", audience="tests.staff_users", audience_filter={})
        audience_sync(task=by_group)
        audience_sync(task=by_function)
    finally:
        audience_unregister("tests.staff_users")
    assert members_of(by_group) == {str(alice.pk)}
    assert members_of(by_function) == {str(bob.pk)}


def test_task_without_audience_plans_every_plain_member_only():
    member_create_many(external_ids=["a", "b"])
    users(3)
    with_audience = task("with")
    without = task("without", audience="", audience_filter=None)
    plan_due_slices()
    assert len(jobs_of(without)) <= 2
    planned = set(Member.objects.filter(id__in=jobs_of(without)).values_list("external_id"))
    assert planned <= {("a",), ("b",)}
    assert with_audience.phase_shift == phases.task_shift(with_audience.id)
    assert without.phase_shift == 0.0


def test_sync_joins_and_leaves_set_based_and_plans_open_slices():
    alive = users(40, is_active=True)
    users(10, prefix="off", is_active=False)
    t = task()
    plan_due_slices()  # the pass runs before planning
    assert members_of(t) == {str(u.pk) for u in alive}
    planned = jobs_of(t)
    assert planned and set(planned.values()) == {JobState.SCHEDULED}

    # Bypassing signals: a bulk update (deactivate 10) and a bulk create (5 new).
    gone = [u.pk for u in alive[:10]]
    User.objects.filter(pk__in=gone).update(is_active=False)
    new = users(5, prefix="new", is_active=True)
    done = audience_sync(task=t)
    assert (done.joined, done.left) == (5, 10)
    # The next period is planned too: every leaver had a job waiting, every joiner gets one.
    assert done.jobs_cancelled >= 10 and done.jobs_planned >= 5
    assert members_of(t) == {str(u.pk) for u in alive[10:] + new}
    t.refresh_from_db()
    assert (t.audience_joined, t.audience_left) == (5, 10)
    assert t.audience_synced_at is not None

    members = dict(Member.objects.values_list("object_id", "id"))
    after = jobs_of(t)
    for pk in gone:
        state = after.get(members[str(pk)])
        assert state in (None, JobState.CANCELLED)
    cancelled = Job.objects.filter(payload__recurring_task_id=t.id, state=JobState.CANCELLED)
    assert set(cancelled.values_list("last_error", flat=True)) <= {REASON_LEFT.format(task="t")}
    # A joiner got a job in each planned slice where its time is still ahead.
    new_members = [members[str(u.pk)] for u in new]
    joiners_jobs = Job.objects.filter(
        payload__recurring_task_id=t.id, payload__member_id__in=new_members
    )
    assert done.jobs_planned == joiners_jobs.filter(state=JobState.SCHEDULED).count()

    # Coming back restores the cancelled jobs still ahead; nothing is planned twice.
    User.objects.filter(pk__in=gone).update(is_active=True)
    back = audience_sync(task=t)
    assert back.joined == 10 and back.jobs_restored >= 10
    assert members_of(t) == {str(u.pk) for u in alive + new}
    keys = Job.objects.filter(payload__recurring_task_id=t.id).values_list("idempotency_key")
    assert len(keys) == len(set(keys))


def test_deleted_objects_leave_and_their_members_are_freed():
    alive = users(6)
    t = task()
    audience_sync(task=t)
    ordinals = set(Member.objects.values_list("ordinal", flat=True))
    User.objects.filter(pk__in=[u.pk for u in alive[:2]])._raw_delete("default")
    done = audience_sync(task=t)
    assert done.left == 2
    assert Member.objects.count() == 4
    users(2, prefix="again")
    audience_sync(task=t)
    # The freed ordinals are given again: the golden prefix (and its evenness) survives.
    assert set(Member.objects.values_list("ordinal", flat=True)) == ordinals


def test_one_phase_per_member_and_task():
    users(200)
    first, second = task("first"), task("second")
    aligned = task("aligned", align_with=first)
    random_ = task("random", phase_strategy="random")
    for t in (first, second, aligned, random_):
        audience_sync(task=t)
    phase = {
        t.name: dict(AudienceMember.objects.filter(task=t).values_list("member", "phase"))
        for t in (first, second, aligned, random_)
    }
    members = dict(Member.objects.values_list("id", "phase"))
    for member_id, own in members.items():
        assert phase["first"][member_id] == phases.shifted_phase(own, first.phase_shift)
        assert phase["aligned"][member_id] == phase["first"][member_id]
        assert phase["second"][member_id] != phase["first"][member_id]
    assert min(phase["random"].values()) >= 0 and max(phase["random"].values()) < 1
    assert aligned.phase_shift == first.phase_shift and aligned.aligned_with_id == first.id


def context(job: Job) -> JobContext:
    return JobContext(
        job_id=job.id,
        payload=job.payload,
        attempt=1,
        idempotency_key=job.idempotency_key,
        run_at=job.run_at,
        delivery=job.delivery,
    )


def test_the_handler_gets_the_object_and_a_member_gone_is_cancelled():
    alice, bob, carol = users(3)
    t = task()
    plan_due_slices()
    member = dict(Member.objects.values_list("object_id", "id"))
    job_of = {
        j.payload["member_id"]: j for j in Job.objects.filter(payload__recurring_task_id=t.id)
    }
    ctx = context(job_of[member[str(alice.pk)]])
    assert ctx.member_object == alice
    assert ctx.extra["member_object"] is ctx.member_object  # loaded once

    # Left the audience (bypassing signals, before any pass) or deleted: no run.
    User.objects.filter(pk=bob.pk).update(is_active=False)
    with pytest.raises(JobCancelled, match=f"left the audience of task {t.name}"):
        _ = context(job_of[member[str(bob.pk)]]).member_object
    Member.objects.filter(pk=member[str(carol.pk)]).delete()
    with pytest.raises(JobCancelled, match="is gone"):
        _ = context(job_of[member[str(carol.pk)]]).member_object


def test_signals_follow_single_saves_and_deletes(django_capture_on_commit_callbacks):
    t = task()
    with django_capture_on_commit_callbacks(execute=True):
        dave = User.objects.create(username="dave")
    assert members_of(t) == {str(dave.pk)}
    assert jobs_of(t) == {}  # nothing planned yet: joining plans only into planned slices
    plan_due_slices()
    with django_capture_on_commit_callbacks(execute=True):
        erin = User.objects.create(username="erin")
    assert members_of(t) == {str(dave.pk), str(erin.pk)}
    erin_member = Member.objects.get(object_id=str(erin.pk)).id
    assert jobs_of(t)[erin_member] == JobState.SCHEDULED
    with django_capture_on_commit_callbacks(execute=True):
        erin.is_active = False
        erin.save()
    assert members_of(t) == {str(dave.pk)}
    assert jobs_of(t)[erin_member] == JobState.CANCELLED
    with django_capture_on_commit_callbacks(execute=True):
        dave.delete()
    assert members_of(t) == set()
    assert not Member.objects.filter(object_id=str(dave.pk)).exists()  # ordinal freed
    t.refresh_from_db()
    assert (t.audience_joined, t.audience_left) == (1, 2)  # since the pass before planning


def test_signals_follow_relations(django_capture_on_commit_callbacks):
    beta = Group.objects.create(name="beta")
    frank, gina = users(2)
    t = task(audience_filter={"groups__name": "beta"})
    with django_capture_on_commit_callbacks(execute=True):
        frank.groups.add(beta)
        beta.user_set.add(gina)
    assert members_of(t) == {str(frank.pk), str(gina.pk)}
    with django_capture_on_commit_callbacks(execute=True):
        beta.user_set.remove(frank)
    assert members_of(t) == {str(gina.pk)}


def test_the_timer_is_installed_and_syncs_every_audience_task():
    from django_celery_beat.models import PeriodicTask

    from schedapp.celery import app
    from tasksapp.recurring.tasks import AUDIENCE_SYNC, audience_sync_task

    entry = PeriodicTask.objects.get(task=AUDIENCE_SYNC)
    assert entry.enabled and entry.interval.every == 5 and entry.interval.period == "minutes"
    app.loader.import_default_modules()
    assert AUDIENCE_SYNC in app.tasks
    users(4)
    t = task()
    assert audience_sync_task.apply().get() == {"t": 4}
    assert len(members_of(t)) == 4


def test_audiences_need_postgresql(monkeypatch):
    from tasksapp.engine.db import tempo_connection

    monkeypatch.setattr(tempo_connection(), "vendor", "sqlite")
    with pytest.raises(PlanningInputError, match="audiences need PostgreSQL"):
        task()
    assert not RecurringTask.objects.exists()


def test_a_task_changes_its_audience_and_the_pass_moves_its_members():
    beta = Group.objects.create(name="beta")
    alice, bob = users(2)
    bob.groups.add(beta)
    t = task()
    plan_due_slices()
    assert members_of(t) == {str(alice.pk), str(bob.pk)}
    recurring_task_update(task=t, audience_filter={"groups__name": "beta"})
    done = audience_sync(task=t)
    assert (done.joined, done.left) == (0, 1)
    assert members_of(t) == {str(bob.pk)}

    with pytest.raises(PlanningInputError, match="audience_filter must be a JSON object"):
        recurring_task_update(task=t, audience_filter={"nope": 1})
    with pytest.raises(PlanningInputError, match="cannot gain or lose its audience"):
        recurring_task_update(task=t, audience="")
    plain = task("plain", audience="", audience_filter=None)
    with pytest.raises(PlanningInputError, match="cannot gain or lose its audience"):
        recurring_task_update(task=plain, audience="auth.User")
    t.refresh_from_db()
    plain.refresh_from_db()
    assert t.audience_filter == {"groups__name": "beta"} and plain.audience == ""


def test_a_save_queries_nothing_more_inside_its_transaction(django_capture_on_commit_callbacks):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tasksapp.recurring import signals

    t = task()  # saving a task makes the audiences be read again
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with CaptureQueriesContext(connection) as queries:
            hank = User.objects.create(username="hank")
        assert not [q for q in queries if "tasksapp_recurringtask" in q["sql"]]
    assert len(callbacks) == 1 and members_of(t) == {str(hank.pk)}
    assert signals._fresh()  # read after commit; the next saves look it up at once
