import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.engine import options
from tasksapp.engine import services as errors
from tasksapp.engine.models import Job, JobState
from tasksapp.engine.retry import ERR_POLICY_DELAYS
from tasksapp.engine.services import JobInputError, job_cancel, job_retry, job_schedule
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
HANDLER = "tests.handlers.recording.record"


def soon() -> dt.datetime:
    return timezone.now() + dt.timedelta(minutes=5)


def test_schedule_stores_a_scheduled_job_with_defaults():
    job = job_schedule(handler=HANDLER, run_at=soon(), payload={"user": 7})
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED
    assert job.payload == {"user": 7}
    assert job.attempts == 0 and job.max_attempts == 5
    assert job.delivery == "transactional"
    assert len(job.idempotency_key) == 32
    assert job.retry_policy == {"base": 1.0, "factor": 2.0, "jitter": 0.5, "cap": 300.0}


def test_same_idempotency_key_returns_the_existing_job():
    first = job_schedule(handler=HANDLER, run_at=soon(), idempotency_key="sync:42:2026-11")
    again = job_schedule(
        handler=HANDLER, run_at=soon() + dt.timedelta(hours=1), idempotency_key="sync:42:2026-11"
    )
    assert again.id == first.id
    assert again.run_at == first.run_at
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"handler": "no_dots"},
            "handler must be a dotted name such as 'package.module.function'.",
        ),
        (
            {"handler": "tests.handlers.recording.missing"},
            "handler 'tests.handlers.recording.missing' is not registered. ",
        ),
        (
            {"handler": "os.system"},
            "handler 'os.system' is not registered. ",
        ),
        ({"run_at": dt.datetime(2030, 1, 1)}, errors.ERR_RUN_AT_NAIVE),
        ({"run_at": "2030-01-01T00:00:00Z"}, errors.ERR_RUN_AT_TYPE),
        ({"payload": {"when": dt.date(2030, 1, 1)}}, "payload must be JSON-serialisable: "),
        ({"payload": {"x": float("nan")}}, "payload must be JSON-serialisable: "),
        ({"max_attempts": 0}, options.ERR_MAX_ATTEMPTS),
        ({"max_attempts": True}, options.ERR_MAX_ATTEMPTS),
        (
            {"delivery": "twice"},
            "delivery must be one of: transactional, at_least_once, at_most_once.",
        ),
        ({"time_limit": -1}, options.ERR_TIME_LIMIT),
        ({"idempotency_key": ""}, options.ERR_KEY),
        (
            {"retry_policy": {"delays": []}},
            ERR_POLICY_DELAYS,
        ),
    ],
)
def test_bad_input_raises_a_clear_error_and_stores_nothing(kwargs, message):
    arguments = {"handler": HANDLER, "run_at": soon(), **kwargs}
    with pytest.raises(JobInputError) as raised:
        job_schedule(**arguments)
    assert str(raised.value).startswith(message)
    assert Job.objects.count() == 0


def test_cancel_moves_a_scheduled_job_and_is_idempotent():
    job = JobFactory(run_at=soon())
    assert job_cancel(job_id=job.id).state == JobState.CANCELLED
    assert job_cancel(job_id=job.id).state == JobState.CANCELLED


def test_cancel_refuses_a_finished_job():
    job = JobFactory(state=JobState.SUCCEEDED)
    with pytest.raises(JobInputError) as raised:
        job_cancel(job_id=job.id)
    assert str(raised.value) == errors.ERR_CANCEL_STATE.format(job_id=job.id, state="succeeded")
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.cancel_requested_at is None


@pytest.mark.parametrize("state", [JobState.CLAIMED, JobState.RUNNING])
def test_cancel_of_a_leased_job_requests_it_once(state):
    job = JobFactory(state=state, lease_token=3)
    first = job_cancel(job_id=job.id)
    assert first.state == state and first.cancel_requested_at is not None
    again = job_cancel(job_id=job.id)
    assert again.cancel_requested_at == first.cancel_requested_at
    assert again.lease_token == 3


def test_retry_of_a_cancelled_job_forgets_the_cancel_request():
    job = JobFactory(state=JobState.CANCELLED, cancel_requested_at=timezone.now())
    assert job_retry(job_id=job.id).cancel_requested_at is None


def test_cancel_unknown_job():
    with pytest.raises(JobInputError) as raised:
        job_cancel(job_id=999_999)
    assert str(raised.value) == "job 999999 does not exist."


def test_retry_reschedules_a_dead_job_with_one_more_attempt():
    job = JobFactory(state=JobState.DEAD, attempts=5, max_attempts=5)
    retried = job_retry(job_id=job.id)
    assert retried.state == JobState.SCHEDULED
    assert retried.max_attempts == 6
    assert retried.run_at <= timezone.now()


def test_retry_refuses_a_succeeded_job():
    job = JobFactory(state=JobState.SUCCEEDED)
    with pytest.raises(JobInputError) as raised:
        job_retry(job_id=job.id)
    assert str(raised.value) == errors.ERR_RETRY_STATE.format(job_id=job.id, state="succeeded")


@pytest.mark.parametrize(
    "run_at",
    [
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        dt.datetime(9999, 12, 31, tzinfo=dt.UTC),
        timezone.now() - dt.timedelta(days=2),
        timezone.now() + dt.timedelta(days=365 * 11),
    ],
)
def test_a_run_time_far_from_now_is_refused(run_at):
    with pytest.raises(errors.JobInputError, match="run_at must lie between "):
        job_schedule(handler="tests.handlers.recording.record", run_at=run_at)
    assert not Job.objects.exists()


def test_a_run_time_a_little_in_the_past_runs_at_once():
    run_at = timezone.now() - dt.timedelta(hours=1)
    assert job_schedule(handler="tests.handlers.recording.record", run_at=run_at).run_at == run_at
