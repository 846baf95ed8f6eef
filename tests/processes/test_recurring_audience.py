"""Recurring tasks over auth users, run by a real dispatcher and Celery worker: users
created, deactivated in bulk (QuerySet.update, no signals) and deleted between two
periods; each active user of the audience runs exactly once per period and task, users
outside it never run, and a user in two tasks never runs for both at the same instant."""

import datetime as dt
import os
from collections import Counter

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

import tests.handlers.audience  # noqa: F401  (registers record_member here too)
from tasksapp.engine.models import Job, JobState
from tasksapp.recurring.models import Member
from tasksapp.recurring.services import plan_due_slices, recurring_task_create
from tests.processes.support import Cluster, effect_counts, wait_for

pytestmark = pytest.mark.processes

HANDLER = "tests.handlers.audience.record_member"
PERIOD = dt.timedelta(minutes=1)
MODULES = os.environ["TEMPO_HANDLER_MODULES"] + ",tests.handlers.audience"


@pytest.fixture
def workers(db_url, broker_url, queue_name, tmp_path, sql, settings):
    settings.TEMPO_PLANNING = {
        "PHASE_STRATEGY": "golden",
        "HORIZON_SECONDS": 5.0,  # one period at a time: each pass is 10 s before the next
        "LATE_GRACE_SECONDS": 900.0,
    }
    running = Cluster(
        database_url=db_url,
        broker_url=broker_url,
        queue=queue_name,
        logs=tmp_path,
        TEMPO_HANDLER_MODULES=MODULES,
    )
    running.dispatcher("d1")
    running.worker("w1", concurrency=4)
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
        timeout=30,
        message="worker ready",
    )
    yield running
    running.stop()


MEMBER_USER: dict[int, str] = {}  # kept as seen: a deleted user's member is deleted too


def runs(sql, task, period: int) -> Counter:
    """Successful runs per user of one period of `task`, from the effects written."""
    done = effect_counts(sql)
    jobs = Job.objects.filter(payload__recurring_task_id=task.id, payload__occurrence=period)
    MEMBER_USER.update(Member.objects.values_list("id", "object_id"))
    member_user = MEMBER_USER
    counted: Counter = Counter()
    for job_id, member_id in jobs.values_list("id", "payload__member_id"):
        if done.get(job_id):
            counted[int(member_user[member_id])] += done[job_id]
    return counted


def settled(task, period: int) -> bool:
    jobs = Job.objects.filter(payload__recurring_task_id=task.id, payload__occurrence=period)
    open_states = {JobState.SCHEDULED, JobState.CLAIMED, JobState.RUNNING, JobState.FAILED}
    return jobs.exists() and not jobs.filter(state__in=open_states).exists()


def test_each_active_user_runs_once_per_period_and_task(workers, sql):
    first = User.objects.bulk_create(User(username=f"u{n}") for n in range(20))
    outside = User.objects.bulk_create(User(username=f"x{n}", is_active=False) for n in range(4))
    # Both periods (the shortest is a minute) lie in the past, each planned as if 50 s into
    # it (the planner's `now`): the period after it begins 10 s later, beyond the planning
    # horizon, and every run is due at once, within the late grace. Periods 0 and 1 end 65
    # and 5 s ago.
    epoch = timezone.now().replace(microsecond=0) - 2 * PERIOD - dt.timedelta(seconds=5)
    into = dt.timedelta(seconds=50)
    audience = {"audience": "auth.User", "audience_filter": {"is_active": True}}
    tasks = [
        recurring_task_create(
            name=name, handler=HANDLER, period=PERIOD, epoch=epoch, max_attempts=1, **audience
        )
        for name in ("sync", "report")
    ]
    plan_due_slices(now=epoch + into)  # period 0, after the pass brought the 20 users in
    for task in tasks:
        wait_for(lambda t=task: settled(t, 0), timeout=30, message=f"{task.name}: period 0")
        assert runs(sql, task, 0) == Counter({u.pk: 1 for u in first})

    # Between the periods, none through a signal the pass depends on.
    joined = User.objects.bulk_create(User(username=f"n{n}") for n in range(5))
    User.objects.filter(pk__in=[u.pk for u in first[:5]]).update(is_active=False)
    deleted = first[5:8]
    User.objects.filter(pk__in=[u.pk for u in deleted]).delete()
    active = first[8:] + joined

    plan_due_slices(now=epoch + PERIOD + into)  # period 1, after the pass
    for task in tasks:
        wait_for(lambda t=task: settled(t, 1), timeout=30, message=f"{task.name}: period 1")
        assert runs(sql, task, 1) == Counter({u.pk: 1 for u in active})

    ran = {user for task in tasks for period in (0, 1) for user in runs(sql, task, period)}
    assert not ran & {u.pk for u in outside}
    # One phase per member and task: never both tasks at the same instant.
    for period in (0, 1):
        at = [
            dict(
                Job.objects.filter(
                    payload__recurring_task_id=task.id, payload__occurrence=period
                ).values_list("payload__member_id", "run_at")
            )
            for task in tasks
        ]
        assert all(at[0][member] != at[1][member] for member in at[0].keys() & at[1].keys())
