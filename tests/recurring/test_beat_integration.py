"""The daily planner end to end: the beat entry a migration installs, the Celery task it
names, and the jobs it plans, claimed by the dispatcher and run by the executor."""

import datetime as dt
import time

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from schedapp.celery import app
from tasksapp.engine.dispatcher.loop import DispatcherLoop
from tasksapp.engine.models import Job, JobState
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.recurring.models import SlicePlan
from tasksapp.recurring.services import member_create_many, recurring_task_create
from tasksapp.recurring.tasks import PLAN_DUE_SLICES, plan_due_slices_task

HANDLER = "tests.handlers.recording.record"
PERIOD = dt.timedelta(minutes=10)
MINUTE = dt.timedelta(minutes=1)


@pytest.mark.django_db  # runs before any transactional test empties the tables
def test_migrate_installs_the_daily_planner_in_beat():
    entry = PeriodicTask.objects.get(task=PLAN_DUE_SLICES)
    assert entry.enabled and entry.interval is None
    crontab = entry.crontab
    assert (crontab.minute, crontab.hour, crontab.day_of_month, crontab.day_of_week) == (
        "0",
        "0",
        "*",
        "*",
    )
    assert str(crontab.timezone) == "UTC"
    assert entry.start_time is not None  # beat runs it once as soon as it starts


def test_the_beat_entry_names_a_registered_task():
    app.loader.import_default_modules()
    assert PLAN_DUE_SLICES in app.tasks


@pytest.fixture
def planning(settings):
    settings.TEMPO_PLANNING = {
        "PHASE_STRATEGY": "golden",
        "HORIZON_SECONDS": 30.0,
        "LATE_GRACE_SECONDS": 900.0,
    }
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 0.1}


@pytest.fixture
def dispatcher(publisher):
    loop = DispatcherLoop(name="planning-test", publisher=publisher)
    loop.start()
    yield loop
    loop.stop()


def step_until(loop, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        loop.step(wait=True)
        if predicate():
            return
    raise AssertionError("the dispatcher did not claim the planned jobs in time")


@pytest.mark.django_db(transaction=True)
def test_the_beat_task_plans_jobs_that_the_dispatcher_runs(
    planning, dispatcher, publisher, effects
):
    members = member_create_many(external_ids=[f"m{n}" for n in range(6)])
    now = timezone.now()
    # Period 0 started almost a period ago: the six members' runs (phases 0 to 0.854) all
    # lie in the past, within the late grace; period 1 starts beyond the horizon.
    task = recurring_task_create(
        name="sync", handler=HANDLER, period=PERIOD, slices=2, epoch=now - PERIOD + MINUTE
    )

    result = plan_due_slices_task.apply().get()

    assert result == {"slices": 2, "jobs": len(members), "missed": 0, "failed_tasks": []}
    due = Job.objects.filter(payload__recurring_task_id=task.id)
    assert set(SlicePlan.objects.values_list("period", "slice_index")) == {(0, 0), (0, 1)}
    assert all(job.run_at < now for job in due.all())

    step_until(dispatcher, lambda: len(publisher.claims) >= len(members))
    assert {claim[0] for claim in publisher.claims} == set(due.values_list("id", flat=True))
    for batch in publisher.batches:
        execute_batch(batch)

    assert set(due.values_list("state", flat=True)) == {JobState.SUCCEEDED}
    assert effects.per_job() == {job_id: 1 for job_id in due.values_list("id", flat=True)}
    assert {job.payload["member_id"] for job in due.all()} == {m.id for m in members}
    for job in due.all():
        assert job.started_at >= job.run_at

    again = plan_due_slices_task.apply().get()
    assert (again["slices"], again["jobs"]) == (0, 0)
