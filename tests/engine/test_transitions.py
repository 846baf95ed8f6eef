"""Every transition is guarded on state and fencing token: a stale holder changes nothing."""

import datetime as dt
import time

import pytest
from django.db import connection
from django.utils import timezone

from tasksapp.engine.models import Job, JobState, WorkerProcess
from tasksapp.engine.store.rows import ms_whole
from tasksapp.engine.transitions import (
    LEASE_EXPIRED_ERROR,
    LOST_RUN_ERROR,
    START_LEAD_SECONDS,
    job_claim_due,
    job_fail,
    job_poll_due,
    job_prune_held,
    job_reap_expired,
    job_release,
    job_renew,
    job_snooze,
    job_start,
    job_start_held,
    job_succeed,
)
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
ALL = list(range(16))


def claim_one(job, owner="d1", lead=1.0):
    (claim,) = job_claim_due(ids=[job.id], owner=owner, ttl=10, lead=lead)
    return claim


def test_claim_is_won_once_and_bumps_the_token():
    job = JobFactory()
    first = job_claim_due(ids=[job.id], owner="d1", ttl=10)
    second = job_claim_due(ids=[job.id], owner="d2", ttl=10)
    assert [c.id for c in first] == [job.id] and second == []
    job.refresh_from_db()
    assert job.state == JobState.CLAIMED and job.claimed_by == "d1"
    assert job.lease_token == first[0].token == 1


def test_claim_skips_jobs_not_due_within_the_lead():
    later = JobFactory(run_at=timezone.now() + dt.timedelta(minutes=1))
    assert job_claim_due(ids=[later.id], owner="d1", ttl=10) == []


def test_start_requires_the_current_token_and_happens_once():
    job = JobFactory()
    claim = claim_one(job)
    assert job_start(claims=[(job.id, claim.token - 1)], worker="w", ttl=5) == []
    (started,) = job_start(claims=[(job.id, claim.token)], worker="w", ttl=5)
    assert started.attempt == 1
    assert job_start(claims=[(job.id, claim.token)], worker="w2", ttl=5) == []  # duplicate
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.claimed_by == "w" and job.attempts == 1


def test_start_within_the_lead_bounds_the_database_clock_until_run_at():
    """A job due within START_LEAD_SECONDS starts at once; `begins_at` is the moment by
    which the database clock has surely reached its run time."""
    job = JobFactory(run_at=timezone.now() + dt.timedelta(milliseconds=300))
    claim = claim_one(job)
    (started,) = job_start(claims=[(job.id, claim.token)], worker="w", ttl=5)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.started_at == job.run_at  # the plan
    # Never later than the run time's distance (a slow answer only brings it nearer).
    assert started.begins_at - time.monotonic() < 0.31
    time.sleep(max(0.0, started.begins_at - time.monotonic()))
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        assert cursor.fetchone()[0] >= job.run_at


def test_start_refuses_a_job_due_beyond_the_lead():
    job = JobFactory(run_at=timezone.now() + dt.timedelta(seconds=START_LEAD_SECONDS + 1))
    claim = claim_one(job, lead=START_LEAD_SECONDS + 2)
    assert job_start(claims=[(job.id, claim.token)], worker="w", ttl=5) == []
    job.refresh_from_db()
    assert job.state == JobState.CLAIMED


def test_finish_records_when_the_handler_began():
    job = JobFactory()
    claim = claim_one(job)
    job_start(claims=[(job.id, claim.token)], worker="w", ttl=5)
    began = job.run_at + dt.timedelta(milliseconds=3, microseconds=250)
    assert job_succeed(outcomes=[(job.id, claim.token, None, began.timestamp() * 1000)])
    job.refresh_from_db()
    assert abs(job.started_at - began) <= dt.timedelta(microseconds=1)


def test_succeed_with_a_stale_token_changes_nothing():
    job = JobFactory()
    claim = claim_one(job)
    job_start(claims=[(job.id, claim.token)], worker="w", ttl=5)
    assert job_succeed(outcomes=[(job.id, claim.token + 1, None, None)]) == set()
    assert job_succeed(outcomes=[(job.id, claim.token, {"n": 1}, None)]) == {job.id}
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.result == {"n": 1}


def test_fail_schedules_the_retry_or_buries_the_job():
    job = JobFactory()
    claim = claim_one(job)
    job_start(claims=[(job.id, claim.token)], worker="w", ttl=5)
    assert job_fail(job_id=job.id, token=claim.token, error="boom", kind="exception", retry_in=2)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.last_error == "boom"
    assert job.errors[0]["attempt"] == 1 and job.errors[0]["error"] == "boom"
    assert job.run_at > timezone.now() + dt.timedelta(seconds=1)
    assert not job_fail(job_id=job.id, token=claim.token, error="late", kind="x", retry_in=None)


def test_renew_extends_only_current_leases():
    job = JobFactory()
    claim = claim_one(job)
    job_start(claims=[(job.id, claim.token)], worker="w", ttl=1)
    assert job_renew(leases=[(job.id, claim.token - 1)], ttl=60).count == 0
    assert job_renew(leases=[(job.id, claim.token)], ttl=60).count == 1
    job.refresh_from_db()
    assert job.lease_expires_at > timezone.now() + dt.timedelta(seconds=50)


def expire(job):
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))


def test_reaper_returns_a_claimed_job_whose_message_was_lost():
    job = JobFactory()
    claim = claim_one(job)
    expire(job)
    reaped = job_reap_expired(partitions=16, owned=ALL)
    assert reaped.count == 1
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED and job.attempts == 0
    # Due again at once, with what a dispatcher needs to hold it.
    assert reaped.due == [[job.id, ms_whole(job.run_at), job.priority, job.queue]]
    # The stale message can no longer start it.
    assert job_start(claims=[(job.id, claim.token)], worker="w", ttl=5) == []


@pytest.mark.parametrize(
    ("delivery", "attempts", "max_attempts", "expected"),
    [
        ("at_least_once", 1, 5, JobState.FAILED),
        ("at_most_once", 1, 5, JobState.LOST),
        ("at_least_once", 5, 5, JobState.DEAD),
    ],
)
def test_reaper_handles_a_lost_running_job_per_delivery_mode(
    delivery, attempts, max_attempts, expected
):
    job = JobFactory(delivery=delivery, max_attempts=max_attempts)
    claim = claim_one(job)
    job_start(claims=[(job.id, claim.token)], worker="w", ttl=5)
    Job.objects.filter(id=job.id).update(attempts=attempts)
    expire(job)
    reaped = job_reap_expired(partitions=16, owned=ALL)
    assert reaped.count == 1
    job.refresh_from_db()
    assert job.state == expected
    # Only a retry is due again; a lost or dead job is not.
    retried = [[job.id, ms_whole(job.run_at), job.priority, job.queue]]
    assert reaped.due == (retried if expected == JobState.FAILED else [])
    assert job.last_error == LEASE_EXPIRED_ERROR
    assert job.errors[-1]["kind"] == "lease_expired"
    # The worker that lost the lease can no longer finish it.
    assert job_succeed(outcomes=[(job.id, claim.token, None, None)]) == set()


def test_reaper_runs_a_lost_transactional_job_again_and_says_why():
    job = JobFactory(delivery="transactional", max_attempts=1)
    claim = claim_one(job)
    job_start(claims=[(job.id, claim.token)], worker="w", ttl=5)
    expire(job)
    reaped = job_reap_expired(partitions=16, owned=ALL)
    job.refresh_from_db()
    assert (job.state, job.attempts) == (JobState.SCHEDULED, 0)
    assert reaped.due == [[job.id, ms_whole(job.run_at), job.priority, job.queue]]
    assert job.last_error == LOST_RUN_ERROR and job.errors[-1]["kind"] == "lost_run"
    assert job_succeed(outcomes=[(job.id, claim.token, None, None)]) == set()


def test_reaper_only_touches_owned_partitions_and_reports_the_next_expiry():
    jobs = [JobFactory() for _ in range(4)]
    for job in jobs:
        claim_one(job)
    Job.objects.filter(id=jobs[0].id).update(
        lease_expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    other = [p for p in ALL if p != jobs[0].id % 16]
    reaped = job_reap_expired(partitions=16, owned=other)
    assert reaped.count == 0 and reaped.next_expiry_ms is not None and reaped.due == []
    assert job_reap_expired(partitions=16, owned=[jobs[0].id % 16]).count == 1


def test_poll_pages_through_jobs_that_share_one_run_time():
    run_at = timezone.now() + dt.timedelta(seconds=30, microseconds=123_457)
    jobs = JobFactory.create_batch(7, run_at=run_at)
    seen, after = [], None
    for _ in range(5):
        page = job_poll_due(lookahead=60, partitions=16, owned=ALL, limit=3, after=after)
        if not page:
            break
        seen += [row.id for row in page]
        after = (page[-1].run_at, page[-1].id)
    assert seen == sorted(j.id for j in jobs)  # every job once, in (run_at, id) order


# --- deferred starts ---------------------------------------------------------------------


@pytest.fixture
def worker_row():
    return WorkerProcess.objects.create(name="host:7", hostname="host", pid=7)


def start_deferring(*jobs, worker="host:7"):
    claims = [(job.id, claim_one(job).token) for job in jobs]
    return job_start(claims=claims, worker=worker, ttl=5, defer_starts=True), claims


def test_a_deferred_start_reads_all_but_at_most_once_jobs_and_starts_those(worker_row):
    deferred = [JobFactory(delivery="at_least_once"), JobFactory(delivery="transactional")]
    started = JobFactory(delivery="at_most_once")  # durable before its handler, as ever
    jobs, claims = start_deferring(*deferred, started)
    by_id = {job.id: job for job in jobs}
    for job in deferred:
        assert not by_id[job.id].start_written and by_id[job.id].attempt == 1
        job.refresh_from_db()
        assert job.state == JobState.CLAIMED and job.attempts == 1  # counted by the claim
    assert by_id[started.id].start_written and by_id[started.id].attempt == 1
    started.refresh_from_db()
    assert started.state == JobState.RUNNING and started.attempts == 1
    worker_row.refresh_from_db()
    assert worker_row.held == {str(job_id): token for job_id, token in claims}


def test_a_claim_counts_the_attempt_and_gives_it_back_if_it_never_began():
    """The claim's attempt is counted at once; an expired claim whose message no worker
    started gives it back, where one that began (a failed run) keeps it."""
    job = JobFactory(delivery="at_least_once", max_attempts=3)
    token = claim_one(job).token
    job.refresh_from_db()
    assert (job.state, job.attempts) == (JobState.CLAIMED, 1)
    [started] = job_start(claims=[(job.id, token)], worker="host:7", ttl=5)
    assert started.attempt == 1  # the start counts nothing more
    assert job_fail(job_id=job.id, token=token, error="boom", kind="x", retry_in=0)
    claim_one(job)
    job.refresh_from_db()
    assert (job.state, job.attempts) == (JobState.CLAIMED, 2)
    expire(job)
    assert job_reap_expired(partitions=16, owned=ALL).count == 1
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED and job.attempts == 1  # the failed one only
    assert len(job.errors) == 1


def test_a_deferred_job_is_started_and_ended_in_one_update(worker_row):
    job, still_running = JobFactory(delivery="at_least_once"), JobFactory(delivery="at_least_once")
    _, [(job_id, token), (other_id, other_token)] = start_deferring(job, still_running)
    began = job.run_at + dt.timedelta(milliseconds=2)
    assert job_succeed(outcomes=[(job_id, token + 1, None, None)], worker="host:7") == set()
    worker_row.refresh_from_db()
    assert worker_row.held == {str(job_id): token, str(other_id): other_token}
    done = job_succeed(outcomes=[(job_id, token, 5, began.timestamp() * 1000)], worker="host:7")
    assert done == {job_id}
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.attempts == 1 and job.result == 5
    assert job.claimed_by == "host:7" and abs(job.started_at - began) <= dt.timedelta(
        microseconds=1
    )
    worker_row.refresh_from_db()
    assert worker_row.held == {str(other_id): other_token}  # the success left the record
    job_succeed(outcomes=[(other_id, other_token, None, None)], worker="host:7")
    job_prune_held(worker="host:7")
    worker_row.refresh_from_db()
    assert worker_row.held is None  # nothing claimed left to hold


def test_a_deferred_start_written_later_counts_the_attempt_once(worker_row):
    job = JobFactory(delivery="at_least_once")
    _, [(job_id, token)] = start_deferring(job)
    assert job_start_held(began=[(job_id, token - 1, None)], worker="host:7", ttl=30).count == 0
    assert job_start_held(began=[(job_id, token, None)], worker="host:7", ttl=30).count == 1
    assert job_start_held(began=[(job_id, token, None)], worker="host:7", ttl=30).count == 0
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempts == 1 and job.claimed_by == "host:7"
    assert job.lease_expires_at > timezone.now() + dt.timedelta(seconds=20)
    assert job_succeed(outcomes=[(job_id, token, None, None)], worker="host:7") == {job_id}
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.attempts == 1


def test_a_deferred_job_fails_snoozes_and_goes_back_as_a_started_one_would(worker_row):
    failing, snoozing, released = (JobFactory(delivery="at_least_once") for _ in range(3))
    _, claims = start_deferring(failing, snoozing, released)
    tokens = dict(claims)
    assert job_fail(job_id=failing.id, token=tokens[failing.id], error="boom", kind="x", retry_in=1)
    assert job_snooze(job_id=snoozing.id, token=tokens[snoozing.id], delay=5)
    assert job_release(leases=[(released.id, tokens[released.id])]) == 1
    for job in (failing, snoozing, released):
        job.refresh_from_db()
    assert failing.state == JobState.FAILED and failing.attempts == 1
    assert failing.errors[0]["attempt"] == 1
    assert snoozing.state == JobState.SCHEDULED and snoozing.attempts == 0  # given back
    assert snoozing.history[0]["attempt"] == 1
    assert released.state == JobState.SCHEDULED and released.attempts == 0


def test_the_reaper_counts_the_attempt_of_an_expired_job_a_worker_held_unstarted(worker_row):
    """A claim that expired while a worker ran the job, its start deferred (the worker
    cut off, frozen or dead): a failed attempt, as for a started job. A claim whose
    message no worker read: back to scheduled, nothing counted."""
    held, lost = JobFactory(delivery="at_least_once"), JobFactory(delivery="at_least_once")
    start_deferring(held)
    claim_one(lost)
    expire(held), expire(lost)
    assert job_reap_expired(partitions=16, owned=ALL).count == 2
    held.refresh_from_db(), lost.refresh_from_db()
    assert held.state == JobState.FAILED and held.attempts == 1
    assert held.errors[0]["attempt"] == 1 and held.last_error == LEASE_EXPIRED_ERROR
    assert lost.state == JobState.SCHEDULED and lost.attempts == 0 and lost.errors == []


@pytest.mark.parametrize(
    ("delivery", "state", "attempts"),
    [("transactional", JobState.SCHEDULED, 0), ("at_least_once", JobState.FAILED, 1)],
)
def test_a_deferred_start_lost_with_its_worker_is_reaped_per_delivery(
    worker_row, delivery, state, attempts
):
    """A transactional job whose start was deferred committed nothing when its worker
    died: due again at once, its attempt given back, a lost run recorded. An
    at-least-once one may have had its effects: its attempt counts."""
    job = JobFactory(delivery=delivery, max_attempts=3)
    _, [(job_id, token)] = start_deferring(job)
    expire(job)
    assert job_reap_expired(partitions=16, owned=ALL).count == 1
    job.refresh_from_db()
    assert (job.state, job.attempts) == (state, attempts)
    kind = "lost_run" if delivery == "transactional" else "lease_expired"
    assert job.errors[-1]["kind"] == kind
    assert job_succeed(outcomes=[(job_id, token, None, None)]) == set()  # the stale token
