"""The overlap policy, decided when a run starts against the previous run's state: the
jobs run by the real worker code, in this process, against the real database."""

import pytest

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.schedules.models import GUARD_HANDLER, RunOutcome, ScheduleRun
from tasksapp.schedules.services import schedule_create, schedule_run_now

pytestmark = pytest.mark.django_db(transaction=True)
HANDLER = "tests.handlers.recording.record"
NEVER = "0 0 1 1 *"  # no fire time during the test: its runs are the operator's


def claim(run):
    (taken,) = job_claim_due(ids=[run.job_id], owner="t", ttl=10, lead=2)
    return taken


def start(taken):
    return execute_batch([[taken.id, taken.token, taken.run_at_ms]])


def two_runs(overlap):
    schedule = schedule_create(name=f"o-{overlap}", handler=HANDLER, cron=NEVER, overlap=overlap)
    return (
        schedule,
        schedule_run_now(schedule_id=schedule.id),
        schedule_run_now(schedule_id=schedule.id),
    )


def test_allow_runs_beside_an_unfinished_previous_run(effects):
    _, first, second = two_runs("allow")
    claim(first)  # claimed, not finished
    assert Job.objects.get(id=second.job_id).handler == HANDLER  # no guard needed
    start(claim(second))
    assert effects.count(second.job_id) == 1
    assert Job.objects.get(id=first.job_id).state == JobState.CLAIMED


def test_skip_does_not_run_while_the_previous_run_is_unfinished(effects):
    _, first, second = two_runs("skip")
    claim(first)
    assert Job.objects.get(id=second.job_id).handler == GUARD_HANDLER
    start(claim(second))
    job = Job.objects.get(id=second.job_id)
    assert effects.count(second.job_id) == 0
    assert job.state == JobState.SUCCEEDED and job.result["skipped"] == "overlap"
    run = ScheduleRun.objects.get(id=second.id)
    assert run.outcome == RunOutcome.SKIPPED_OVERLAP
    assert run.details == {"previous_job": first.job_id, "previous_state": "claimed"}


def test_skip_runs_once_the_previous_run_has_finished(effects):
    _, first, second = two_runs("skip")
    start(claim(first))
    assert Job.objects.get(id=first.job_id).state == JobState.SUCCEEDED
    start(claim(second))
    assert effects.count(first.job_id) == effects.count(second.job_id) == 1
    assert ScheduleRun.objects.get(id=second.id).outcome == RunOutcome.RUN_NOW


def test_a_skipped_run_is_not_the_previous_run_of_the_next(effects):
    schedule, first, second = two_runs("skip")
    claim(first)
    start(claim(second))  # skipped: the first is unfinished
    third = schedule_run_now(schedule_id=schedule.id)
    start(claim(third))  # its previous run is the first, still unfinished
    assert ScheduleRun.objects.get(id=third.id).details["previous_job"] == first.job_id
    assert effects.count(third.job_id) == 0


def test_cancel_previous_cancels_the_unfinished_run_and_runs(effects):
    _, first, second = two_runs("cancel_previous")
    claim(first)
    start(claim(second))
    assert effects.count(second.job_id) == 1
    previous = Job.objects.get(id=first.job_id)
    assert previous.cancel_requested_at is not None  # claimed: its worker ends it cancelled
    assert ScheduleRun.objects.get(id=second.id).details["cancelled_previous"] is True


def test_cancel_previous_cancels_a_waiting_previous_run_at_once(effects):
    _, first, second = two_runs("cancel_previous")
    start(claim(second))  # the first never started: still scheduled
    assert Job.objects.get(id=first.job_id).state == JobState.CANCELLED
    assert effects.count(second.job_id) == 1


def test_a_django_task_runs_on_a_schedule_with_the_payloads_arguments():
    from tests.handlers import tasks_api

    schedule = schedule_create(
        name="task", handler=tasks_api.add, cron=NEVER, payload={"args": [2, 3], "kwargs": {}}
    )
    assert schedule.handler == "tests.handlers.tasks_api.add"
    run = schedule_run_now(schedule_id=schedule.id)
    start(claim(run))
    job = Job.objects.get(id=run.job_id)
    assert job.state == JobState.SUCCEEDED and job.result == 5


def test_a_guarded_django_task_gets_its_arguments_too():
    from tests.handlers import tasks_api

    schedule = schedule_create(
        name="guarded-task",
        handler=tasks_api.add,
        cron=NEVER,
        overlap="skip",
        payload={"args": [4], "kwargs": {"b": 5}},
    )
    run = schedule_run_now(schedule_id=schedule.id)
    start(claim(run))
    assert Job.objects.get(id=run.job_id).result == 9
