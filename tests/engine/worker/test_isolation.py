"""One job's bad data never hurts another: a handler that exits, a message or result the
jobs table cannot store, a policy past the bounds — each is that job's failed attempt,
and the other jobs of its batch run and are recorded as if it were not there."""

from __future__ import annotations

import pytest

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tests.factories import JobFactory
from tests.handlers.recording import HOSTILE_RESULTS

pytestmark = pytest.mark.django_db(transaction=True)
DELIVERIES = ["transactional", "at_least_once", "at_most_once"]


def run_batch(jobs) -> int:
    """Claim the jobs and run them as one message, as a worker gets them."""
    claims = job_claim_due(ids=[j.id for j in jobs], owner="d", ttl=10)
    return execute_batch([[c.id, c.token, c.run_at_ms] for c in claims])


def bystanders(delivery: str, count: int = 4) -> list[Job]:
    return [
        JobFactory(handler="tests.handlers.recording.echo", delivery=delivery, payload={"i": i})
        for i in range(count)
    ]


def assert_bystanders_succeeded(jobs: list[Job]) -> None:
    for job in jobs:
        job.refresh_from_db()
        assert (job.state, job.attempts) == (JobState.SUCCEEDED, 1), job.last_error
        assert job.result["payload"] == job.payload


@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize(
    ("handler", "error"),
    [
        ("tests.handlers.recording.exit_now", "SystemExit: 3"),
        ("tests.handlers.recording.interrupt", "KeyboardInterrupt: "),
        ("tests.handlers.recording.fail_unreadably", "UnreadableError (its message could"),
    ],
)
def test_a_handler_that_raises_past_exception_is_a_failed_attempt(delivery, handler, error):
    before, after = bystanders(delivery, 2), bystanders(delivery, 2)
    bad = JobFactory(handler=handler, delivery=delivery, max_attempts=2)
    assert run_batch([*before, bad, *after]) == 5  # the batch ran to its end
    bad.refresh_from_db()
    assert (bad.state, bad.attempts) == (JobState.FAILED, 1)
    assert bad.last_error.startswith(error)
    assert bad.lease_expires_at is None  # its slot is free: nothing holds it running
    assert_bystanders_succeeded(before + after)


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_an_error_message_the_database_cannot_store_is_made_storable(delivery):
    bad = JobFactory(
        handler="tests.handlers.recording.fail_with_unstorable_text",
        delivery=delivery,
        max_attempts=1,
    )
    others = bystanders(delivery)
    run_batch([bad, *others])
    bad.refresh_from_db()
    assert bad.state == JobState.DEAD
    assert "\x00" not in bad.last_error and "<script>x</script>" in bad.last_error
    assert bad.last_error.encode("utf-8")  # no lone surrogate left
    assert_bystanders_succeeded(others)


@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize("kind", sorted(HOSTILE_RESULTS))
def test_a_result_that_cannot_be_stored_fails_only_its_own_job(delivery, kind):
    before, after = bystanders(delivery, 2), bystanders(delivery, 2)
    bad = JobFactory(
        handler="tests.handlers.recording.return_hostile",
        delivery=delivery,
        payload={"kind": kind},
        max_attempts=1,
    )
    run_batch([*before, bad, *after])
    bad.refresh_from_db()
    assert bad.state == JobState.DEAD and bad.result is None
    assert bad.last_error.startswith("ValueError: handler returned a result that cannot be")
    assert_bystanders_succeeded(before + after)


@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize(
    "policy", [{"delays": [1e300]}, {"base": 1, "factor": 1e300, "cap": 1e300}, {"x": 1}]
)
def test_a_stored_policy_past_the_bounds_does_not_abort_the_batch(delivery, policy):
    """Written before the bounds existed (or by hand): computed with the default."""
    bad = JobFactory(handler="tests.handlers.recording.fail_until", delivery=delivery)
    Job.objects.filter(id=bad.id).update(retry_policy=policy)
    others = bystanders(delivery)
    run_batch([bad, *others])
    bad.refresh_from_db()
    assert (bad.state, bad.attempts) == (JobState.FAILED, 1)
    assert_bystanders_succeeded(others)


def test_an_unregistered_handler_fails_with_a_clear_error_and_is_never_imported():
    import sys

    bad = JobFactory(handler="tests.handlers.recording.noop", max_attempts=1)
    Job.objects.filter(id=bad.id).update(handler="tests.handlers.imported_on_lookup.run")
    others = bystanders("transactional")
    run_batch([bad, *others])
    bad.refresh_from_db()
    assert bad.state == JobState.DEAD
    assert bad.last_error.startswith("handler 'tests.handlers.imported_on_lookup.run' is not")
    assert bad.errors[-1]["kind"] == "handler"
    assert "tests.handlers.imported_on_lookup" not in sys.modules
    assert_bystanders_succeeded(others)
