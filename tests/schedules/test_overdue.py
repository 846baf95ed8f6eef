"""Runs planned before an outage of the dispatchers and workers (the planner ran): when
their jobs start late, each follows its schedule's catch-up policy and window, decided
as the job starts, whichever late job is claimed first and in both delivery modes. The
jobs run through the real worker code in this process (as test_overlap does), against
the real database and its clock; the last test runs a real dispatcher and worker."""

import datetime as dt

import pytest
import time_machine

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.schedules.models import GUARD_HANDLER, RunOutcome, ScheduleRun
from tasksapp.schedules.services import schedule_create, schedule_run_now
from tasksapp.schedules.services.late import LATE_MARK, database_now, late_run_decided
from tests.processes.support import effect_counts, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
HANDLER = "tests.handlers.recording.record"
MINUTE = dt.timedelta(minutes=1)
SECOND = dt.timedelta(seconds=1)
DELIVERIES = ["transactional", "at_least_once"]
ORDERS = ["oldest_first", "newest_first"]


@pytest.fixture(autouse=True)
def _horizon(settings):
    settings.TEMPO_SCHEDULES = {"HORIZON_SECONDS": 600, "LATE_GRACE_SECONDS": 10}


def planned_before_outage(name, *, delivery, catchup, window=dt.timedelta(hours=1), **options):
    """Every minute, planned five minutes ago up to a minute from now; nothing ran since:
    the runs of 4.5, 3.5, 2.5, 1.5 and 0.5 minutes ago are late, the next one is ahead."""
    now = database_now()
    with time_machine.travel(now - 5 * MINUTE, tick=False):
        schedule = schedule_create(
            name=name,
            handler=options.pop("handler", HANDLER),
            every=MINUTE,
            start_at=now - 4 * MINUTE - 30 * SECOND,
            end_at=now + MINUTE,
            catchup=catchup,
            catchup_window=window,
            delivery=delivery,
            **options,
        )
    runs = list(ScheduleRun.objects.filter(schedule=schedule).order_by("fire_at"))
    assert len(runs) == 6 and runs[4].run_at < now < runs[5].run_at
    return schedule, runs[:5], runs[5]


def claim_and_start(runs, order):
    """Claim and start each run's job on its own, in `order` of fire times."""
    for run in runs if order == "oldest_first" else runs[::-1]:
        (taken,) = job_claim_due(ids=[run.job_id], owner="t", ttl=10, lead=2)
        assert execute_batch([[taken.id, taken.token, taken.run_at_ms]]) == 1


def start_as_one_batch(runs):
    """One message of all the runs' jobs, newest first: all started, then run in turn."""
    taken = job_claim_due(ids=[run.job_id for run in runs[::-1]], owner="t", ttl=10, lead=2)
    by_id = {claim.id: claim for claim in taken}
    batch = [[by_id[r.job_id].id, by_id[r.job_id].token, by_id[r.job_id].run_at_ms] for r in runs]
    assert execute_batch(batch[::-1]) == len(runs)


def outcomes(runs):
    return [ScheduleRun.objects.get(id=run.id).outcome for run in runs]


def job(run):
    return Job.objects.get(id=run.job_id)


@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize("order", ORDERS)
def test_skip_runs_none_of_the_late_runs(effects, delivery, order):
    schedule, late, ahead = planned_before_outage("skip", delivery=delivery, catchup="skip")
    assert all(job(run).handler == GUARD_HANDLER for run in [*late, ahead])
    claim_and_start(late, order)
    assert effects.count() == 0
    assert outcomes(late) == [RunOutcome.SKIPPED_MISSED] * 5
    for run in late:
        done = job(run)
        assert done.state == JobState.SUCCEEDED and done.result["skipped"] == "missed"
        assert "catch-up 'skip'" in done.result["why"] and done.result[LATE_MARK] > 10
    assert job(ahead).state == JobState.SCHEDULED and outcomes([ahead]) == [RunOutcome.PLANNED]


@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize("order", ORDERS)
def test_one_runs_only_the_latest_late_run(effects, delivery, order):
    schedule, late, ahead = planned_before_outage("one", delivery=delivery, catchup="one")
    claim_and_start(late, order)
    assert outcomes(late) == [RunOutcome.SKIPPED_MISSED] * 4 + [RunOutcome.CAUGHT_UP]
    assert effects.per_job() == {late[-1].job_id: 1}
    latest = late[-1].fire_at.isoformat()
    for run in late[:4]:
        result = job(run).result
        assert result["skipped"] == "missed" and result["later_fire"] == latest
        assert f"the fire of {latest} is due too" in result["why"]
    caught_up = ScheduleRun.objects.get(id=late[-1].id)
    assert caught_up.details[LATE_MARK] >= 30 and caught_up.details["catchup"] == "one"
    assert job(late[-1]).result == {"job": late[-1].job_id}  # the schedule's handler's own


@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize("order", ORDERS)
def test_all_runs_the_late_runs_within_the_window(effects, delivery, order):
    schedule, late, _ = planned_before_outage(
        "all", delivery=delivery, catchup="all", window=3 * MINUTE
    )
    claim_and_start(late, order)
    # fired 4.5 and 3.5 minutes ago: older than the window; the others each run once
    assert outcomes(late) == [RunOutcome.SKIPPED_MISSED] * 2 + [RunOutcome.CAUGHT_UP] * 3
    assert effects.per_job() == {run.job_id: 1 for run in late[2:]}
    for run in late[:2]:
        assert job(run).result["outside_window"] is True
        assert "older than the catch-up window (180 s)" in job(run).result["why"]


def test_the_schedules_page_shows_how_late_each_run_was_and_why_it_was_skipped(
    effects, viewer_client
):
    schedule, late, _ = planned_before_outage("shown", delivery="transactional", catchup="one")
    claim_and_start(late, "oldest_first")
    html = viewer_client.get(f"/schedules/{schedule.id}/").content.decode()
    runs = html.split('id="last-runs"')[1].split("</table>")[0]
    assert runs.count(">skipped missed<") == 4 and runs.count(">caught up<") == 1
    assert runs.count(" s late</span>") == 5 and "catch-up &#x27;one&#x27; runs the latest" in runs


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_one_with_overlap_skip_runs_the_latest_whatever_waits_before_it(effects, delivery):
    """Started as one message, newest first: when the latest runs, the earlier late runs
    are started (running) or waiting, yet none of them is its previous run: each skips
    itself. The next run, on time, finds the latest finished."""
    schedule, late, _ = planned_before_outage(
        "one-skip", delivery=delivery, catchup="one", overlap="skip"
    )
    start_as_one_batch(late)
    assert outcomes(late) == [RunOutcome.SKIPPED_MISSED] * 4 + [RunOutcome.CAUGHT_UP]
    assert effects.per_job() == {late[-1].job_id: 1}


def test_one_with_overlap_skip_still_skips_while_a_caught_up_run_is_unfinished(effects):
    schedule, late, _ = planned_before_outage(
        "one-busy", delivery="at_least_once", catchup="one", overlap="skip"
    )
    claim_and_start(late, "newest_first")
    Job.objects.filter(id=late[-1].job_id).update(state=JobState.RUNNING)  # still running
    run = schedule_run_now(schedule_id=schedule.id)
    (taken,) = job_claim_due(ids=[run.job_id], owner="t", ttl=10, lead=2)
    execute_batch([[taken.id, taken.token, taken.run_at_ms]])
    assert ScheduleRun.objects.get(id=run.id).outcome == RunOutcome.SKIPPED_OVERLAP
    assert ScheduleRun.objects.get(id=run.id).details["previous_job"] == late[-1].job_id


def test_a_run_within_the_late_grace_runs_as_planned(effects):
    now = database_now()
    with time_machine.travel(now - 20 * SECOND, tick=False):
        schedule = schedule_create(
            name="on-time", handler=HANDLER, every=MINUTE, start_at=now - 3 * SECOND, catchup="skip"
        )
    first = ScheduleRun.objects.filter(schedule=schedule).order_by("fire_at").first()
    claim_and_start([first], "oldest_first")
    assert effects.per_job() == {first.job_id: 1}
    first.refresh_from_db()
    assert first.outcome == RunOutcome.PLANNED and first.details == {}


def test_a_redelivered_skip_stays_skipped_and_a_caught_up_run_runs_again(effects):
    schedule, late, _ = planned_before_outage("again", delivery="at_least_once", catchup="one")
    claim_and_start(late[-2:], "oldest_first")
    # both jobs delivered a second time (their first attempt's worker died, say)
    Job.objects.filter(id__in=[r.job_id for r in late[-2:]]).update(state=JobState.SCHEDULED)
    claim_and_start(late[-2:], "oldest_first")
    assert outcomes(late[-2:]) == [RunOutcome.SKIPPED_MISSED, RunOutcome.CAUGHT_UP]
    assert effects.per_job() == {late[-1].job_id: 2}  # at least once: its handler again


def test_a_late_django_task_runs_through_the_guard_with_its_arguments():
    from tests.handlers import tasks_api

    schedule, late, _ = planned_before_outage(
        "task",
        delivery="transactional",
        catchup="one",
        handler=tasks_api.add,
        payload={"args": [2, 3], "kwargs": {}},
    )
    claim_and_start(late, "newest_first")
    assert job(late[-1]).result == 5
    assert outcomes(late)[-1] == RunOutcome.CAUGHT_UP


def test_an_operators_run_now_is_never_late(effects):
    schedule, late, _ = planned_before_outage("run-now", delivery="transactional", catchup="skip")
    run = schedule_run_now(schedule_id=schedule.id)
    assert job(run).handler == HANDLER  # overlaps allowed: no guard needed
    Job.objects.filter(id=run.job_id).update(run_at=database_now() - MINUTE)
    claim_and_start([run], "oldest_first")
    assert effects.per_job() == {run.job_id: 1}


def test_late_decision_is_pure_and_each_skip_holds_from_then_on():
    fire = dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC)
    common = {"window": MINUTE * 10, "grace": SECOND * 10, "fire_at": fire, "run_at": fire}
    on_time = late_run_decided(catchup="skip", now=fire + 10 * SECOND, later_due=None, **common)
    assert on_time.run and on_time.outcome is None
    for now in (fire + 11 * SECOND, fire + 9 * MINUTE, fire + 11 * MINUTE):
        skip = late_run_decided(catchup="skip", now=now, later_due=None, **common)
        superseded = late_run_decided(catchup="one", now=now, later_due=fire + MINUTE, **common)
        assert not skip.run and not superseded.run
    within = late_run_decided(catchup="all", now=fire + 9 * MINUTE, later_due=fire, **common)
    outside = late_run_decided(catchup="all", now=fire + 10 * MINUTE, later_due=None, **common)
    assert within.outcome == RunOutcome.CAUGHT_UP and outside.details["outside_window"]


@pytest.mark.processes
def test_real_processes_down_past_the_fire_times_follow_each_policy(cluster, sql):
    """Planned by the planner, then no dispatcher or worker ran past the fire times:
    once they start, each schedule's late runs go by its policy, in both deliveries."""
    plans = {
        "skip": planned_before_outage("p-skip", delivery="transactional", catchup="skip"),
        "one": planned_before_outage("p-one", delivery="transactional", catchup="one"),
        "all": planned_before_outage(
            "p-all", delivery="at_least_once", catchup="all", window=3 * MINUTE
        ),
    }
    late = {policy: runs for policy, (_, runs, _) in plans.items()}
    ids = [run.job_id for runs in late.values() for run in runs]
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=4)
    wait_for(
        lambda: sql.execute(
            "SELECT count(*) = %s FROM tasksapp_job WHERE id = ANY(%s) AND state = 'succeeded'",
            [len(ids), ids],
        ).fetchone()[0],
        timeout=25,
        message="the late jobs finished",
    )
    assert outcomes(late["skip"]) == [RunOutcome.SKIPPED_MISSED] * 5
    assert outcomes(late["one"]) == [RunOutcome.SKIPPED_MISSED] * 4 + [RunOutcome.CAUGHT_UP]
    assert outcomes(late["all"]) == [RunOutcome.SKIPPED_MISSED] * 2 + [RunOutcome.CAUGHT_UP] * 3
    ran = [late["one"][-1], *late["all"][2:]]
    assert effect_counts(sql) == {run.job_id: 1 for run in ran}
    assert all(job(run).result["skipped"] == "missed" for run in late["skip"])
    # the runs still ahead wait for their fire times
    assert {job(ahead).state for _, _, ahead in plans.values()} == {JobState.SCHEDULED}
