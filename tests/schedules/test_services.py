"""Schedules against the real database: planning ahead, one job per fire time, catch-up
each way, edits, pause, resume, run now, delete, bad input."""

import datetime as dt

import pytest
import time_machine

from tasksapp.engine.models import Job, JobState
from tasksapp.schedules.models import (
    GUARD_HANDLER,
    KEY_PREFIX,
    RunOutcome,
    Schedule,
    ScheduleRun,
)
from tasksapp.schedules.selectors import schedule_fire_times
from tasksapp.schedules.services import (
    ScheduleInputError,
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_run_now,
    schedule_update,
    schedules_plan_due,
)
from tasksapp.schedules.services.schedules import ERR_CRON_XOR_EVERY, ERR_NAME_TAKEN

pytestmark = pytest.mark.django_db
HANDLER = "tests.handlers.recording.record"
UTC = dt.UTC
HOUR = {"HORIZON_SECONDS": 3600}


@pytest.fixture(autouse=True)
def _horizon(settings):
    settings.TEMPO_SCHEDULES = HOUR


def utc(*args):
    return dt.datetime(*args, tzinfo=UTC)


def jobs_of(schedule):
    prefix = KEY_PREFIX.format(schedule_id=schedule.id)
    return list(Job.objects.filter(idempotency_key__startswith=prefix).order_by("run_at"))


def runs_of(schedule, *outcomes):
    runs = ScheduleRun.objects.filter(schedule=schedule).order_by("fire_at")
    return list(runs.filter(outcome__in=outcomes) if outcomes else runs)


def test_create_plans_the_fires_within_the_horizon_through_dst():
    created = utc(2026, 3, 29, 0, 50)  # 01:50 CET; at 01:00 UTC Berlin jumps to 03:00 CEST
    with time_machine.travel(created, tick=False):
        schedule = schedule_create(
            name="quarterly", handler=HANDLER, cron="*/15 * * * *", timezone="Europe/Berlin"
        )
    fires = schedule_fire_times(
        schedule=schedule, start=created, end=created + dt.timedelta(hours=1)
    )
    assert fires == [
        utc(2026, 3, 29, 1),
        utc(2026, 3, 29, 1, 15),
        utc(2026, 3, 29, 1, 30),
        utc(2026, 3, 29, 1, 45),
    ]
    jobs = jobs_of(schedule)
    assert [job.run_at for job in jobs] == fires  # the planner's instants are the same
    assert [job.idempotency_key for job in jobs][
        0
    ] == f"schedule:{schedule.id}:2026-03-29T01:00:00+00:00"
    # each through the guard, which decides a late start's catch-up (test_overdue.py)
    assert all(job.handler == GUARD_HANDLER and job.state == JobState.SCHEDULED for job in jobs)
    assert {job.payload["handler"] for job in jobs} == {HANDLER}
    assert {job.payload["catchup"] for job in jobs} == {"one"}
    assert [run.job_id for run in runs_of(schedule)] == [job.id for job in jobs]
    assert schedule.planned_until == created + dt.timedelta(hours=1)


def test_planning_again_or_from_a_stale_point_makes_no_second_job():
    now = utc(2026, 6, 1, 12)
    with time_machine.travel(now, tick=False):
        schedule = schedule_create(name="minutely", handler=HANDLER, cron="* * * * *")
        assert len(jobs_of(schedule)) == 60
        assert schedules_plan_due().jobs == 0  # planned up to the horizon already
        # a planner that read an old planned_until decides the same fire times again
        Schedule.objects.filter(id=schedule.id).update(planned_until=now, next_fire_at=now)
        summary = schedules_plan_due()
    assert summary.schedules == 1 and summary.jobs == 0
    assert len(jobs_of(schedule)) == 60 and len(runs_of(schedule)) == 60


def test_jitter_delays_each_run_within_its_bound_the_same_way_every_time():
    with time_machine.travel(utc(2026, 6, 1, 12), tick=False):
        schedule = schedule_create(
            name="jittered", handler=HANDLER, cron="*/10 * * * *", jitter=dt.timedelta(seconds=40)
        )
    for run, job in zip(runs_of(schedule), jobs_of(schedule), strict=True):
        assert dt.timedelta(0) <= job.run_at - run.fire_at < dt.timedelta(seconds=40)
        assert job.run_at == run.run_at


def _after_downtime(catchup, *, window=dt.timedelta(hours=1)):
    """A schedule every 10 minutes, planned at 12:00 up to 13:00, then nothing runs until
    15:00:05: the fires from 13:10 to 15:00 were missed."""
    with time_machine.travel(utc(2026, 6, 1, 12), tick=False):
        schedule = schedule_create(
            name=f"catchup-{catchup}",
            handler=HANDLER,
            every=dt.timedelta(minutes=10),
            catchup=catchup,
            catchup_window=window,
        )
    now = utc(2026, 6, 1, 15, 0, 5) + dt.timedelta(seconds=10)
    with time_machine.travel(now, tick=False):
        summary = schedules_plan_due()
    return schedule, summary, now


def test_catchup_skip_runs_none_of_the_missed_fires():
    schedule, summary, now = _after_downtime("skip")
    assert runs_of(schedule, RunOutcome.CAUGHT_UP) == []
    skipped = runs_of(schedule, RunOutcome.SKIPPED_MISSED)
    # one row marks the fires older than the window (13:10 to 14:00), then each one within it
    assert skipped[0].fire_at == utc(2026, 6, 1, 13, 10) and skipped[0].details["outside_window"]
    assert [r.fire_at for r in skipped[1:]] == [
        utc(2026, 6, 1, 14, m) for m in (10, 20, 30, 40, 50)
    ] + [utc(2026, 6, 1, 15)]
    assert summary.skipped == 7 and summary.caught_up == 0
    assert min(job.run_at for job in jobs_of(schedule) if job.run_at > utc(2026, 6, 1, 13)) == utc(
        2026, 6, 1, 15, 10
    )


def test_catchup_one_runs_the_latest_missed_fire_now():
    schedule, summary, now = _after_downtime("one")
    (caught,) = runs_of(schedule, RunOutcome.CAUGHT_UP)
    assert caught.fire_at == utc(2026, 6, 1, 15) and caught.run_at == now
    assert Job.objects.get(id=caught.job_id).run_at == now
    assert len(runs_of(schedule, RunOutcome.SKIPPED_MISSED)) == 6
    assert summary.caught_up == 1


def test_catchup_all_runs_each_missed_fire_within_the_window_now():
    schedule, summary, now = _after_downtime("all")
    caught = runs_of(schedule, RunOutcome.CAUGHT_UP)
    assert [r.fire_at for r in caught] == [utc(2026, 6, 1, 14, m) for m in (10, 20, 30, 40, 50)] + [
        utc(2026, 6, 1, 15)
    ]
    assert {Job.objects.get(id=r.job_id).run_at for r in caught} == {now}
    assert len(runs_of(schedule, RunOutcome.SKIPPED_MISSED)) == 1  # the ones before the window


def test_catchup_window_of_zero_runs_nothing_missed():
    schedule, summary, _ = _after_downtime("all", window=dt.timedelta(0))
    assert runs_of(schedule, RunOutcome.CAUGHT_UP) == []
    assert summary.skipped == 1  # one row for everything older than the window


def test_an_edit_applies_from_the_next_unplanned_fire():
    with time_machine.travel(utc(2026, 6, 1, 12), tick=False):
        schedule = schedule_create(name="edited", handler=HANDLER, cron="*/30 * * * *")
        planned = [job.run_at for job in jobs_of(schedule)]
        schedule_update(schedule_id=schedule.id, cron="*/20 * * * *", payload={"v": 2})
    assert planned == [utc(2026, 6, 1, 12, 30), utc(2026, 6, 1, 13)]
    with time_machine.travel(utc(2026, 6, 1, 12, 40), tick=False):
        schedules_plan_due()
    jobs = jobs_of(schedule)
    assert [job.run_at for job in jobs] == planned + [
        utc(2026, 6, 1, 13, 20),
        utc(2026, 6, 1, 13, 40),
    ]
    assert [job.payload["payload"] for job in jobs] == [{}, {}, {"v": 2}, {"v": 2}]


def test_pause_cancels_the_waiting_runs_ahead_and_resume_brings_them_back():
    with time_machine.travel(utc(2026, 6, 1, 12), tick=False):
        schedule = schedule_create(name="paused", handler=HANDLER, cron="*/20 * * * *")
        schedule_pause(schedule_id=schedule.id)
        assert {job.state for job in jobs_of(schedule)} == {JobState.CANCELLED}
        assert {r.outcome for r in runs_of(schedule)} == {RunOutcome.CANCELLED}
        assert schedules_plan_due().jobs == 0
    with time_machine.travel(utc(2026, 6, 1, 12, 30), tick=False):
        schedule = schedule_resume(schedule_id=schedule.id)
        states = {job.run_at: job.state for job in jobs_of(schedule)}
    # 12:20 passed while paused: not run; 12:40 and 13:00 come back; 13:20 is planned
    assert states[utc(2026, 6, 1, 12, 20)] == JobState.CANCELLED
    assert states[utc(2026, 6, 1, 12, 40)] == JobState.SCHEDULED
    assert states[utc(2026, 6, 1, 13, 20)] == JobState.SCHEDULED
    assert schedule.active and schedule.planned_until == utc(2026, 6, 1, 13, 30)


def test_run_now_adds_one_run_at_once():
    schedule = schedule_create(name="now", handler=HANDLER, cron="0 0 1 1 *")
    run = schedule_run_now(schedule_id=schedule.id)
    job = Job.objects.get(id=run.job_id)
    assert run.outcome == RunOutcome.RUN_NOW and job.run_at == run.fire_at
    assert job.idempotency_key.startswith(f"schedule:{schedule.id}:run-now:")


def test_delete_cancels_the_waiting_jobs_and_removes_the_runs():
    schedule = schedule_create(name="gone", handler=HANDLER, cron="*/5 * * * *")
    ids = [job.id for job in jobs_of(schedule)]
    result = schedule_delete(schedule_id=schedule.id)
    assert result["jobs_cancelled"] == len(ids) == 12
    assert set(Job.objects.filter(id__in=ids).values_list("state", flat=True)) == {"cancelled"}
    assert not Schedule.objects.exists() and not ScheduleRun.objects.exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "* * * * *", "every": dt.timedelta(minutes=1)}, ERR_CRON_XOR_EVERY),
        ({}, ERR_CRON_XOR_EVERY),
        ({"cron": "* * * *"}, "cron must have 5 fields"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone must be an IANA zone"),
        (
            {"cron": "* * * * *", "handler": "no.such.handler"},
            "handler 'no.such.handler' is not registered",
        ),
        ({"every": dt.timedelta(0)}, "every must be a timedelta"),
        ({"cron": "* * * * *", "catchup": "some"}, "catchup must be one of: skip, one, all."),
        ({"cron": "* * * * *", "overlap": "queue"}, "overlap must be one of"),
        ({"cron": "* * * * *", "max_attempts": 0}, "max_attempts must be"),
        (
            {"cron": "* * * * *", "start_at": dt.datetime(2026, 1, 1)},
            "start_at must be a timezone-aware",
        ),
    ],
)
def test_bad_input_is_refused_and_stores_nothing(options, message):
    with pytest.raises(ScheduleInputError) as exc:
        schedule_create(**{"name": "bad", "handler": HANDLER, **options})
    assert str(exc.value).startswith(message)
    assert not Schedule.objects.exists() and not Job.objects.exists()


def test_a_taken_name_is_refused_and_an_edit_of_it_changes_nothing():
    schedule_create(name="a", handler=HANDLER, cron="0 * * * *")
    other = schedule_create(name="b", handler=HANDLER, cron="0 * * * *")
    with pytest.raises(ScheduleInputError) as exc:
        schedule_create(name="a", handler=HANDLER, cron="5 * * * *")
    assert str(exc.value) == ERR_NAME_TAKEN.format(name="a")
    with pytest.raises(ScheduleInputError):
        schedule_update(schedule_id=other.id, name="a", cron="7 * * * *")
    other.refresh_from_db()
    assert (other.name, other.cron) == ("b", "0 * * * *")


def test_the_beat_task_plans_and_removes_runs_past_their_age(settings):
    from tasksapp.schedules.tasks import plan_schedules_task

    settings.TEMPO_SCHEDULES = {"HORIZON_SECONDS": 600, "RUNS_KEPT_DAYS": 1}
    with time_machine.travel(utc(2026, 6, 1, 12), tick=False):
        old = schedule_create(name="old", handler=HANDLER, cron="*/5 * * * *")
    ScheduleRun.objects.filter(schedule=old).update(decided_at=utc(2026, 5, 30))
    kept = len(runs_of(old))
    with time_machine.travel(utc(2026, 6, 1, 12, 6), tick=False):  # 12:15 is due by 12:16
        result = plan_schedules_task()
    assert result["runs_removed"] == kept == 2 and result["schedules"] == result["jobs"] == 1
    assert all(run.decided_at > utc(2026, 5, 31) for run in runs_of(old))


def test_the_planner_reads_only_schedules_with_a_fire_time_due(settings):
    settings.TEMPO_SCHEDULES = {"HORIZON_SECONDS": 300}
    with time_machine.travel(utc(2026, 6, 1, 12, 0, 30), tick=False):
        hourly = schedule_create(name="hourly", handler=HANDLER, cron="0 * * * *")
        minutely = schedule_create(name="minutely", handler=HANDLER, cron="* * * * *")
    assert hourly.next_fire_at == utc(2026, 6, 1, 13) and len(jobs_of(hourly)) == 0
    assert minutely.next_fire_at == utc(2026, 6, 1, 12, 6)
    with time_machine.travel(utc(2026, 6, 1, 12, 1, 30), tick=False):
        summary = schedules_plan_due()
    assert summary.schedules == 1 and summary.jobs == 1  # the hourly one is not read
    with time_machine.travel(utc(2026, 6, 1, 12, 55), tick=False):
        schedules_plan_due()
    assert [job.run_at for job in jobs_of(hourly)] == [utc(2026, 6, 1, 13)]
    hourly.refresh_from_db()
    assert hourly.next_fire_at == utc(2026, 6, 1, 14)


def test_a_schedule_past_its_end_is_read_no_more():
    with time_machine.travel(utc(2026, 6, 1, 12), tick=False):
        ending = schedule_create(
            name="ending", handler=HANDLER, cron="* * * * *", end_at=utc(2026, 6, 1, 12, 2)
        )
    assert [job.run_at for job in jobs_of(ending)] == [
        utc(2026, 6, 1, 12, 1),
        utc(2026, 6, 1, 12, 2),
    ]
    assert ending.next_fire_at is None
    with time_machine.travel(utc(2026, 6, 1, 12, 30), tick=False):
        assert schedules_plan_due().schedules == 0
