"""Retention never removes a job that can still run or that something still needs, and
removes everything else past its age (against the real database, both stores)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasksapp.engine.models import FINAL_STATES, Dispatcher, Job, JobState, WorkerProcess
from tasksapp.graphs.models import GraphRun, GraphState, TaskRun
from tasksapp.recurring.models import RecurringTask, SlicePlan
from tasksapp.retention.models import JobRollup, RollupMark
from tasksapp.retention.services import retention_run
from tasksapp.retention.settings import RetentionSettings
from tasksapp.web.models import OperatorAction
from tests.factories import JobFactory
from tests.handlers.recording import KEPT_AGES
from tests.retention.conftest import FAST, ON_POSTGRES

RECORD = "tests.handlers.recording.record"
NOOP = "tests.handlers.recording.noop"  # its own ages in FAST: succeeded 2 days, dead 60
KEPT = "tests.handlers.recording.kept"  # declares its own: succeeded 1 day, cancelled 45
DAY = dt.timedelta(days=1)
OPEN, CLOSED = 5, 1  # occurrences (periods) whose slice plan is open, closed


def _task_with_plans(now: dt.datetime) -> RecurringTask:
    task = RecurringTask.objects.create(
        name="daily", handler=RECORD, epoch=now - 30 * DAY, period=DAY, slices=1
    )
    for period, ends_at in ((OPEN, now + DAY), (CLOSED, now - 20 * DAY)):
        SlicePlan.objects.create(
            task=task,
            period=period,
            slice_index=0,
            slices=1,
            period_start=ends_at - DAY,
            period_length=DAY,
            starts_at=ends_at - DAY,
            ends_at=ends_at,
        )
    return task


def _clean() -> None:
    TaskRun.objects.all().delete()
    GraphRun.objects.all().delete()
    Job.objects.all().delete()
    SlicePlan.objects.all().delete()
    RecurringTask.objects.all().delete()
    RollupMark.objects.all().delete()
    JobRollup.objects.all().delete()


AGES = st.dictionaries(
    st.sampled_from(FINAL_STATES), st.floats(min_value=0.5, max_value=60), max_size=4
)
JOBS = st.lists(
    st.fixed_dictionaries(
        {
            "state": st.sampled_from(JobState.values),
            "age_days": st.none() | st.floats(min_value=0, max_value=90),
            "handler": st.sampled_from([RECORD, NOOP, KEPT]),
            "task": st.sampled_from([None, "planned", "other", "garbage"]),
            "occurrence": st.sampled_from([OPEN, CLOSED]),
            "in_graph": st.booleans(),
            "attempts_left": st.booleans(),
        }
    ),
    min_size=1,
    max_size=25,
)


def _expected_days(spec: dict, ages_of: dict) -> float:
    """The age the docs promise, computed apart from the code: the task's, then the
    handler's setting, then the handler's declaration, then the state's default."""
    state = spec["state"]
    for ages in (
        ages_of.get(spec["task"], {}),
        FAST["HANDLER_DAYS"].get(spec["handler"], {}),
        KEPT_AGES if spec["handler"] == KEPT else {},
    ):
        if state in ages:
            return ages[state]
    return FAST[f"{state.upper()}_DAYS"]


@pytest.mark.django_db
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(jobs=JOBS, planned_ages=AGES, other_ages=AGES)
def test_removes_exactly_the_finished_jobs_past_their_age_that_nothing_needs(
    retention, store, jobs, planned_ages, other_ages
):
    _clean()
    now = timezone.now()
    planned = _task_with_plans(now)
    planned.retention = planned_ages
    planned.save()
    other = RecurringTask.objects.create(
        name="other", handler=RECORD, epoch=now, period=DAY, retention=other_ages
    )
    task_ids = {"planned": planned.id, "other": other.id, "garbage": "x1"}
    made = []
    for spec in jobs:
        payload = {}
        if spec["task"] is not None:
            payload = {
                "recurring_task_id": task_ids[spec["task"]],
                "occurrence": spec["occurrence"],
            }
        finished = None if spec["age_days"] is None else now - spec["age_days"] * DAY
        job = JobFactory(
            handler=spec["handler"],
            state=spec["state"],
            finished_at=finished,
            payload=payload,
            attempts=1,
            max_attempts=5 if spec["attempts_left"] else 1,
        )
        if spec["in_graph"]:  # a graph still running points at it
            GraphRun.objects.create(job=job, plan={}, state=GraphState.RUNNING)
        made.append((job.id, spec, finished))

    retention_run(now=now)

    ages_of = {"planned": planned_ages, "other": other_ages}
    left = set(Job.objects.values_list("id", flat=True))
    for job_id, spec, finished in made:
        removable = (
            spec["state"] in FINAL_STATES
            and finished is not None
            and finished < now - _expected_days(spec, ages_of) * DAY
            and not spec["in_graph"]
            and not (spec["task"] == "planned" and spec["occurrence"] == OPEN)
        )
        assert (job_id not in left) == removable, (spec, finished, ages_of)


@pytest.mark.django_db
def test_jobs_not_rolled_up_yet_stay(retention, store):
    now = timezone.now()
    retention["ROLLUP_DELAY_SECONDS"] = 0
    old = JobFactory(state=JobState.SUCCEEDED, finished_at=now - 10 * DAY)
    RollupMark.objects.create(pk=1, until=now - 11 * DAY)
    # A mark that cannot move (its run is "now" 11 days ago): the job is not rolled up.
    retention_run(now=now - 11 * DAY + dt.timedelta(seconds=1))
    assert Job.objects.filter(id=old.id).exists()
    retention_run(now=now)
    assert not Job.objects.filter(id=old.id).exists()


@pytest.mark.django_db
def test_a_finished_graph_run_goes_with_its_jobs_a_live_one_stays(retention, store):
    now = timezone.now()
    runs = {}
    for state, age in (("succeeded", 40), ("running", 40), ("succeeded", 5)):
        parent = JobFactory(state=JobState.SUCCEEDED, finished_at=now - age * DAY)
        child = JobFactory(state=JobState.SUCCEEDED, finished_at=now - age * DAY)
        graph = GraphRun.objects.create(
            job=parent, plan={}, state=state, finished_at=now - age * DAY
        )
        TaskRun.objects.create(graph_run=graph, task="t", layer=0, job=child)
        runs[(state, age)] = (graph.id, parent.id, child.id)

    report = retention_run(now=now)

    gone_graph, gone_parent, gone_child = runs[("succeeded", 40)]
    assert not GraphRun.objects.filter(id=gone_graph).exists()
    assert not Job.objects.filter(id__in=[gone_parent, gone_child]).exists()
    assert not TaskRun.objects.filter(graph_run_id=gone_graph).exists()
    for key in (("running", 40), ("succeeded", 5)):
        graph, parent, child = runs[key]
        assert GraphRun.objects.filter(id=graph).exists()
        assert Job.objects.filter(id__in=[parent, child]).count() == 2
    assert report.removed["graph_runs"] == 1


@pytest.mark.django_db
def test_bookkeeping_rows_have_their_own_ages(retention, store):
    now = timezone.now()
    old_at, new_at = now - 500 * DAY, now - DAY
    for name, at in (("old", old_at), ("new", new_at)):
        Dispatcher.objects.create(name=name, hostname="h", pid=1, heartbeat_at=at)
        WorkerProcess.objects.create(name=name, hostname="h", pid=1, heartbeat_at=at)
        OperatorAction.objects.create(
            username="op", via="api", action="retry", target_type="job", target_id=name, at=at
        )
        JobRollup.objects.create(span=3600, bucket=at, handler=RECORD, state="succeeded")

    retention_run(now=now)

    assert list(Dispatcher.objects.values_list("name", flat=True)) == ["new"]
    assert list(WorkerProcess.objects.values_list("name", flat=True)) == ["new"]
    assert list(OperatorAction.objects.values_list("target_id", flat=True)) == ["new"]
    assert list(JobRollup.objects.filter(span=3600).values_list("bucket", flat=True)) == [new_at]


@pytest.mark.django_db
def test_old_slice_plans_go_but_never_a_tasks_latest(retention, store):
    now = timezone.now()
    task = RecurringTask.objects.create(
        name="daily", handler=RECORD, epoch=now - 100 * DAY, period=DAY, slices=1
    )
    for period in range(3):  # all three ended long ago; the task is paused since
        start = task.epoch + period * DAY
        SlicePlan.objects.create(
            task=task,
            period=period,
            slice_index=0,
            slices=1,
            period_start=start,
            period_length=DAY,
            starts_at=start,
            ends_at=start + DAY,
        )
    retention_run(now=now)
    assert list(SlicePlan.objects.values_list("period", flat=True)) == [2]


def test_settings_are_checked():
    good = {state: 7.0 for state in FINAL_STATES}
    with pytest.raises(Exception, match="days > 0"):
        RetentionSettings(job_days={**good, "dead": 0})
    with pytest.raises(Exception, match="finished states"):
        RetentionSettings(job_days=good, handler_days={"x.y": {"running": 3}})
    with pytest.raises(Exception, match="BATCH_SIZE"):
        RetentionSettings(job_days=good, batch_size=0)
    assert RetentionSettings(job_days=good, handler_days={"x.y": {"dead": 1}}).handler_days == {
        "x.y": {"dead": 1}
    }


@pytest.mark.django_db
def test_the_command_removes_with_a_progress_bar(retention, capsys):
    now = timezone.now()
    JobFactory.create_batch(7, state=JobState.SUCCEEDED, finished_at=now - 8 * DAY)
    kept = JobFactory(state=JobState.SUCCEEDED, finished_at=now - DAY)
    call_command("retention_run")
    out = capsys.readouterr()
    assert list(Job.objects.values_list("id", flat=True)) == [kept.id]
    assert "removed 7 jobs" in out.out
    assert "7/7" in out.err  # tqdm's bar: all of the backlog
    assert FAST["BATCH_SIZE"] < 7  # so it took several batches


@pytest.mark.django_db
def test_the_planner_never_plans_again_an_occurrence_whose_jobs_were_removed(retention, store):
    from django.db.models import F

    from tasksapp.recurring.models import Member
    from tasksapp.recurring.services import (
        member_activate,
        member_create_many,
        member_deactivate,
        plan_due_slices,
        recurring_task_create,
    )

    now = timezone.now()
    then = now - 39 * DAY
    recurring_task_create(
        name="daily",
        handler=RECORD,
        period=DAY,
        slices=4,
        epoch=now.replace(hour=0, minute=0, second=0, microsecond=0) - 40 * DAY,
    )
    member_create_many(external_ids=[f"m{i}" for i in range(20)])
    Job.objects.all().delete()  # what member creation planned at today's time
    plan_due_slices(now=then)
    Job.objects.update(state=JobState.SUCCEEDED, started_at=F("run_at"), finished_at=F("run_at"))
    ran = set(Job.objects.values_list("idempotency_key", flat=True))
    assert len(ran) >= 20

    retention_run(now=now)
    assert not Job.objects.exists()

    plan_due_slices(now=now)
    for member in Member.objects.all()[:5]:
        member_deactivate(member=member)
        member_activate(member=Member.objects.get(pk=member.pk))
    planned_again = set(Job.objects.values_list("idempotency_key", flat=True))
    assert planned_again  # today's occurrences are planned
    assert not planned_again & ran


@pytest.mark.skipif(not ON_POSTGRES, reason="runs these files on SQLite (from PostgreSQL's run)")
def test_retention_on_a_sqlite_database(tmp_path):
    """The embedded mode: the same rules and rollups through the ORM, on SQLite."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'retention.sqlite3'}"}
    files = [__file__, str(Path(__file__).with_name("test_rollups.py"))]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
    result = subprocess.run(
        command,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


@pytest.mark.django_db
def test_a_migration_installs_the_beat_entry_and_the_workers_know_its_task():
    from django_celery_beat.models import PeriodicTask

    from schedapp.celery import app
    from tasksapp.retention.tasks import RETENTION_RUN

    entry = PeriodicTask.objects.get(name="tempo: retention")
    assert entry.task == RETENTION_RUN and entry.enabled
    assert (entry.interval.every, entry.interval.period) == (5, "minutes")
    app.loader.import_default_modules()
    assert RETENTION_RUN in app.tasks


@pytest.mark.skipif(not ON_POSTGRES, reason="SQLite has one writer: runs wait for each other")
@pytest.mark.django_db(transaction=True)
def test_a_run_does_not_wait_for_another_rolling_up(retention):
    import threading

    from django.db import connection, transaction

    from tasksapp.retention.services import rollup_mark, rollup_write

    now = timezone.now()
    JobFactory(state=JobState.SUCCEEDED, finished_at=now - DAY)
    rollup_write(now=now - DAY / 2)
    held, release = threading.Event(), threading.Event()

    def hold_the_mark():
        with transaction.atomic():
            RollupMark.objects.select_for_update().get(pk=1)
            held.set()
            release.wait(30)
        connection.close()

    holder = threading.Thread(target=hold_the_mark)
    holder.start()
    held.wait(10)
    try:
        assert rollup_write(now=now) == rollup_mark()  # returns at once, mark unchanged
    finally:
        release.set()
        holder.join()
    assert rollup_write(now=now) == now
