"""Both job stores do the same: every scenario runs against PostgresJobStore and
SqliteJobStore. The ORM store runs on any database, so both run on the test database;
the last test runs this file again on a SQLite file database, where only the ORM store
runs."""

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from django.forms.models import model_to_dict
from django.utils import timezone

from tasksapp.engine import services
from tasksapp.engine.models import Job, JobQueue, JobState
from tasksapp.engine.store import PostgresJobStore, SqliteJobStore, job_store
from tasksapp.engine.store.base import FREE_LOST_RUNS
from tasksapp.engine.store.postgres import rows_of
from tasksapp.engine.store.rows import (
    Claim,
    FailedAttempt,
    JobTemplate,
    MemberSlice,
    NewJob,
    PollWindow,
    ms_exact,
    ms_whole,
)
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
ON_POSTGRES = connection.vendor == "postgresql"
ALL = list(range(16))
LEASE_LOST = "worker lost"
HANDLER = "tests.handlers.recording.record"
BASE_DIR = Path(__file__).resolve().parents[2]
LOST_RUN_ENTRY = {
    "attempt": 1,
    "at": "2026-01-01T00:00:00+00:00",
    "error": "lost",
    "kind": "lost_run",
}


@pytest.fixture(params=[PostgresJobStore, SqliteJobStore], ids=["postgres", "orm"])
def store(request):
    if request.param is PostgresJobStore and not ON_POSTGRES:
        pytest.skip("PostgreSQL's statements need PostgreSQL")
    return request.param()


def claimed(store, job, lead=1.0):
    (claim,) = store.claim_due(ids=[job.id], owner="d1", ttl=10, lead=lead)
    return claim


def running(store, job, ttl=5):
    claim = claimed(store, job)
    (started,) = store.start(claims=[(job.id, claim.token)], worker="w", ttl=ttl, lead=1.0)
    return started


def expire(job):
    Job.objects.filter(id=job.id).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))


def test_the_store_is_chosen_once_for_the_database_vendor():
    expected = PostgresJobStore if ON_POSTGRES else SqliteJobStore
    assert isinstance(job_store(), expected) and job_store() is job_store()


def test_a_claim_is_won_once_with_the_next_token_and_the_exact_run_time(store):
    job = JobFactory()
    first = store.claim_due(ids=[job.id, -1], owner="d1", ttl=10, lead=1.0)
    assert store.claim_due(ids=[job.id], owner="d2", ttl=10, lead=1.0) == []
    assert first == [Claim(id=job.id, token=1, run_at_ms=ms_exact(job.run_at))]
    job.refresh_from_db()
    assert job.state == JobState.CLAIMED and job.claimed_by == "d1" and job.lease_token == 1


def test_a_claim_skips_jobs_not_due_within_the_lead(store):
    later = JobFactory(run_at=timezone.now() + dt.timedelta(minutes=1))
    assert store.claim_due(ids=[later.id], owner="d1", ttl=10, lead=1.0) == []


def test_a_start_needs_the_current_token_and_returns_the_job(store):
    job = JobFactory(payload={"n": 1}, time_limit=2.5, idempotency_key="start-me")
    claim = claimed(store, job)
    stale = store.start(claims=[(job.id, claim.token - 1)], worker="w", ttl=5, lead=1.0)
    (started,) = store.start(claims=[(job.id, claim.token)], worker="w", ttl=5, lead=1.0)
    again = store.start(claims=[(job.id, claim.token)], worker="w2", ttl=5, lead=1.0)
    assert stale == [] and again == []
    assert (started.id, started.token, started.attempt) == (job.id, claim.token, 1)
    assert (started.handler, started.payload, started.time_limit) == (job.handler, {"n": 1}, 2.5)
    assert started.retry_policy == job.retry_policy and started.idempotency_key == "start-me"
    assert started.run_at == job.run_at and started.clock.read_ms > 0
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.claimed_by == "w" and job.attempts == 1


@pytest.mark.parametrize(
    "run_at",
    [
        dt.datetime(1901, 12, 13, 20, 45, 52, 999_999, tzinfo=dt.UTC),  # before the epoch
        dt.datetime(2026, 11, 28, 3, 0, 0, 1, tzinfo=dt.UTC),
    ],
    ids=["1901", "2026"],
)
def test_a_start_returns_the_run_time_to_the_microsecond(store, run_at):
    job = JobFactory(run_at=run_at)
    claim = claimed(store, job)
    (started,) = store.start(claims=[(job.id, claim.token)], worker="w", ttl=5, lead=1.0)
    assert started.run_at == run_at and started.run_at.utcoffset() == dt.timedelta(0)


def test_a_start_names_the_jobs_queue(store):
    job = JobFactory(queue="partner-api")
    claim = claimed(store, job)
    (started,) = store.start(claims=[(job.id, claim.token)], worker="w", ttl=5, lead=1.0)
    assert started.queue == "partner-api"


def test_a_queues_starts_are_reserved_at_its_rate_a_burst_at_once(store):
    # 10 starts a second, a burst of 3: three at once, then one every 100 ms.
    waits = [store.take_start(queue="api", interval=0.1, burst=3) for _ in range(5)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3] == pytest.approx(0.1, abs=0.03) and waits[4] == pytest.approx(0.2, abs=0.03)
    assert store.take_start(queue="other", interval=0.1, burst=3) == 0.0  # queues apart
    time.sleep(waits[4] + 0.35)  # the reserved starts, then the bucket full again
    assert [store.take_start(queue="api", interval=0.1, burst=3) for _ in range(3)] == [0.0] * 3
    assert store.take_start(queue="api", interval=0.1, burst=3) > 0.05


def test_the_rate_limited_queues_are_listed_with_their_limits(store):
    JobQueue.objects.create(name="api", rate_limit=20, rate_period=2.0)
    JobQueue.objects.create(name="mail", concurrency_limit=3)
    assert store.rate_limits() == {"api": (20, 2.0)}


def test_a_start_refuses_a_job_due_beyond_the_lead(store):
    job = JobFactory(run_at=timezone.now() + dt.timedelta(seconds=3))
    claim = claimed(store, job, lead=5)
    assert store.start(claims=[(job.id, claim.token)], worker="w", ttl=5, lead=1.0) == []


def test_a_success_needs_the_lease_and_records_result_and_start(store):
    job = JobFactory()
    started = running(store, job)
    began = job.run_at + dt.timedelta(milliseconds=3, microseconds=250)
    outcome = (job.id, started.token, {"n": 1}, began.timestamp() * 1000)
    assert store.succeed(outcomes=[(job.id, started.token + 1, None, None)]) == set()
    assert store.succeed(outcomes=[outcome]) == {job.id}
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.result == {"n": 1}
    assert abs(job.started_at - began) <= dt.timedelta(microseconds=1)
    assert job.lease_expires_at is None


@pytest.mark.parametrize(
    ("state", "retry_in"), [(JobState.FAILED, 30.0), (JobState.DEAD, None)], ids=["retry", "dead"]
)
def test_a_failure_appends_one_error_entry(store, state, retry_in):
    job = JobFactory()
    started = running(store, job)
    failed = FailedAttempt(job.id, started.token, state, "boom", "exception", retry_in, None)
    assert store.fail(failed)
    assert not store.fail(failed)  # not running any more
    job.refresh_from_db()
    (entry,) = job.errors
    assert job.state == state and job.last_error == "boom" and job.claimed_by == ""
    assert {k: entry[k] for k in ("attempt", "error", "kind")} == {
        "attempt": 1,
        "error": "boom",
        "kind": "exception",
    }
    assert dt.datetime.fromisoformat(entry["at"]) <= timezone.now()
    retried = job.run_at > timezone.now() + dt.timedelta(seconds=20)
    assert retried == (retry_in is not None)


def test_a_late_start_of_a_claimed_job_needs_its_token_and_counts_the_attempt_once(store):
    asked, other = JobFactory(), JobFactory()
    tokens = {job.id: claimed(store, job).token for job in (asked, other)}
    services.job_cancel(job_id=asked.id)
    began = other.run_at + dt.timedelta(milliseconds=2)
    late = [
        (asked.id, tokens[asked.id], None),
        (other.id, tokens[other.id], began.timestamp() * 1000),
    ]
    stale = store.start_held(began=[(other.id, tokens[other.id] - 1, None)], worker="w", ttl=30)
    started = store.start_held(began=late, worker="w", ttl=30)
    again = store.start_held(began=late, worker="w", ttl=30)
    assert (stale.count, started.count, again.count) == (0, 2, 0)
    assert started.cancel_requested == frozenset({asked.id})
    other.refresh_from_db()
    assert (other.state, other.attempts, other.claimed_by) == (JobState.RUNNING, 1, "w")
    assert abs(other.started_at - began) <= dt.timedelta(microseconds=1)
    assert other.lease_expires_at > timezone.now() + dt.timedelta(seconds=25)


def test_a_renewal_extends_only_current_leases(store):
    job = JobFactory()
    started = running(store, job, ttl=1)
    assert store.renew(leases=[(job.id, started.token - 1)], ttl=60).count == 0
    assert store.renew(leases=[(job.id, started.token)], ttl=60).count == 1
    job.refresh_from_db()
    assert job.lease_expires_at > timezone.now() + dt.timedelta(seconds=50)


def test_a_renewal_names_the_jobs_an_operator_cancelled(store):
    asked, other = JobFactory(), JobFactory()
    leases = [(job.id, running(store, job).token) for job in (asked, other)]
    assert store.renew(leases=leases, ttl=60).cancel_requested == frozenset()
    services.job_cancel(job_id=asked.id)
    renewed = store.renew(leases=leases, ttl=60)
    assert (renewed.count, renewed.cancel_requested) == (2, frozenset({asked.id}))


def test_a_cancel_of_a_running_job_is_fenced(store):
    job = JobFactory()
    started = running(store, job)
    assert not store.cancel_running(job_id=job.id, token=started.token - 1, began_ms=None)
    assert store.cancel_running(job_id=job.id, token=started.token, began_ms=None)
    job.refresh_from_db()
    assert (job.state, job.attempts, job.lease_expires_at) == (JobState.CANCELLED, 1, None)
    assert job.history is None  # no reason given: nothing added


def test_a_cancel_with_a_reason_keeps_it_in_the_history(store):
    job = JobFactory(history=[{"event": "snoozed", "at": "2026-01-01T00:00:00+00:00"}])
    started = running(store, job)
    assert store.cancel_running(
        job_id=job.id, token=started.token, began_ms=None, reason="member left"
    )
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert [(e["event"], e.get("reason")) for e in job.history] == [
        ("snoozed", None),
        ("cancelled", "member left"),
    ]


def test_a_snooze_is_fenced_gives_back_the_attempt_and_is_recorded(store):
    job = JobFactory()
    started = running(store, job)
    assert not store.snooze(job_id=job.id, token=started.token - 1, delay=30)
    assert store.snooze(job_id=job.id, token=started.token, delay=30)
    job.refresh_from_db()
    assert (job.state, job.attempts, job.claimed_by) == (JobState.SCHEDULED, 0, "")
    assert job.run_at > timezone.now() + dt.timedelta(seconds=25)
    (entry,) = job.history
    assert (entry["event"], entry["attempt"], entry["seconds"]) == ("snoozed", 1, 30)


def test_an_expired_lease_of_a_cancelled_job_ends_it_cancelled(store):
    claimed_job, running_job = JobFactory(), JobFactory()
    claimed(store, claimed_job)
    running(store, running_job)
    for job in (claimed_job, running_job):
        services.job_cancel(job_id=job.id)
        expire(job)
    assert store.reap_expired(partitions=16, owned=ALL, error=LEASE_LOST).count == 2
    for job in (claimed_job, running_job):
        job.refresh_from_db()
        assert job.state == JobState.CANCELLED and job.finished_at is not None


def test_a_release_hands_a_started_job_back_without_counting_the_attempt(store):
    job = JobFactory()
    started = running(store, job, ttl=60)
    assert store.release(leases=[(job.id, started.token - 1)]) == 0
    assert store.release(leases=[(job.id, started.token)]) == 1
    job.refresh_from_db()
    assert (job.state, job.attempts, job.claimed_by) == (JobState.SCHEDULED, 0, "")
    assert job.started_at is None and job.lease_expires_at is None
    assert store.release(leases=[(job.id, started.token)]) == 0  # no longer running


def test_the_reaper_returns_a_claimed_job_and_reports_the_next_expiry(store):
    lost, waiting = JobFactory(), JobFactory()
    claimed(store, lost)
    claimed(store, waiting)
    expire(lost)
    reaped = store.reap_expired(partitions=16, owned=ALL, error=LEASE_LOST)
    waiting.refresh_from_db()
    assert reaped.count == 1
    assert abs(reaped.next_expiry_ms - waiting.lease_expires_at.timestamp() * 1000) <= 1
    assert waiting.attempts == 1  # counted by its claim
    lost.refresh_from_db()
    assert lost.state == JobState.SCHEDULED and lost.errors == [] and lost.last_error == ""
    assert lost.attempts == 0  # its claim's attempt never began: given back
    # Due again at once, with what a dispatcher needs to hold it, in both stores.
    assert reaped.due == [[lost.id, ms_whole(lost.run_at), lost.priority, lost.queue]]


@pytest.mark.parametrize(
    ("delivery", "attempts", "expected"),
    [
        ("at_least_once", 1, JobState.FAILED),
        ("at_most_once", 1, JobState.LOST),
        ("transactional", 5, JobState.DEAD),  # its free lost runs used up
    ],
)
def test_the_reaper_handles_a_lost_running_job_per_delivery(store, delivery, attempts, expected):
    free_used = [LOST_RUN_ENTRY] * FREE_LOST_RUNS if delivery == "transactional" else []
    job = JobFactory(delivery=delivery, max_attempts=5, errors=free_used)
    running(store, job)
    Job.objects.filter(id=job.id).update(attempts=attempts)
    planned = Job.objects.get(id=job.id).run_at
    expire(job)
    assert store.reap_expired(partitions=16, owned=ALL, error=LEASE_LOST).count == 1
    job.refresh_from_db()
    assert job.state == expected and job.last_error == LEASE_LOST
    assert [(e["attempt"], e["error"], e["kind"]) for e in job.errors[len(free_used) :]] == [
        (attempts, LEASE_LOST, "lease_expired")
    ]
    if expected == JobState.FAILED:
        assert job.run_at > planned  # the retry is due now
    else:
        assert job.run_at == planned  # a lost or dead job keeps its run time


def test_a_lost_transactional_run_runs_again_without_using_up_an_attempt(store):
    """Its transaction rolled back with the worker: nothing of it committed, so even a
    job of one attempt (a Django Task) runs again, up to FREE_LOST_RUNS times."""
    job = JobFactory(delivery="transactional", max_attempts=1)
    planned = Job.objects.get(id=job.id).run_at
    for lost in range(1, FREE_LOST_RUNS + 1):
        started = running(store, job)
        expire(job)
        reaped = store.reap_expired(
            partitions=16, owned=ALL, error=LEASE_LOST, lost_run_error="rolled back"
        )
        job.refresh_from_db()
        assert (job.state, job.attempts, job.started_at) == (JobState.SCHEDULED, 0, None)
        assert job.run_at >= planned and job.finished_at is None
        assert reaped.due == [[job.id, ms_whole(job.run_at), job.priority, job.queue]]
        assert [(e["attempt"], e["kind"]) for e in job.errors] == [(1, "lost_run")] * lost
        assert job.last_error == "rolled back"
        # The lost worker's late outcome is refused: fenced as ever.
        assert store.succeed(outcomes=[(job.id, started.token, None, None)]) == set()
    running(store, job)
    expire(job)
    store.reap_expired(partitions=16, owned=ALL, error=LEASE_LOST, lost_run_error="rolled back")
    job.refresh_from_db()
    assert (job.state, job.attempts, job.last_error) == (JobState.DEAD, 1, LEASE_LOST)
    assert job.errors[-1]["kind"] == "lease_expired"


@pytest.mark.parametrize("delivery", ["at_least_once", "at_most_once"])
def test_a_lost_run_of_another_delivery_counts_its_attempt(store, delivery):
    job = JobFactory(delivery=delivery, max_attempts=1)
    running(store, job)
    expire(job)
    store.reap_expired(partitions=16, owned=ALL, error=LEASE_LOST, lost_run_error="rolled back")
    job.refresh_from_db()
    assert job.state == (JobState.DEAD if delivery == "at_least_once" else JobState.LOST)
    assert [e["kind"] for e in job.errors] == ["lease_expired"]


def test_the_reaper_only_touches_owned_partitions(store):
    job = JobFactory()
    claimed(store, job)
    expire(job)
    others = [p for p in ALL if p != job.id % 16]
    assert store.reap_expired(partitions=16, owned=others, error=LEASE_LOST).count == 0
    assert store.reap_expired(partitions=16, owned=[job.id % 16], error=LEASE_LOST).count == 1


def test_a_poll_pages_through_jobs_that_share_one_run_time(store):
    run_at = timezone.now() + dt.timedelta(seconds=30, microseconds=123_457)
    jobs = JobFactory.create_batch(5, run_at=run_at)
    JobFactory(run_at=run_at + dt.timedelta(minutes=5))  # beyond the lookahead
    pages, after = [], None
    while page := store.poll_due(PollWindow(60, 16, ALL, limit=2, after=after)):
        pages.append(page)
        after = (page[-1].run_at, page[-1].id)
    assert [len(page) for page in pages] == [2, 2, 1]
    rows = [row for page in pages for row in page]
    assert [row.id for row in rows] == sorted(job.id for job in jobs)
    assert {(row.run_at, row.run_at_ms) for row in rows} == {
        (run_at, int(run_at.timestamp() * 1000))
    }


def new_job(key: str, **fields) -> NewJob:
    values = dict(
        handler=HANDLER,
        run_at=timezone.now(),
        payload={"key": key},
        max_attempts=3,
        retry_policy={"delays": [1]},
        delivery="at_least_once",
        time_limit=None,
        idempotency_key=key,
    )
    return NewJob(**{**values, **fields})


def test_an_insert_stores_new_rows_with_the_defaults_and_skips_taken_keys(store):
    JobFactory(idempotency_key="taken")
    rows = [new_job("a", time_limit=1.5), new_job("taken"), new_job("b", time_limit=2)]
    rows.append(new_job("a"))  # the batch's second "a" is skipped too
    inserted = store.insert_jobs(rows)
    assert [row.idempotency_key for row in inserted] == ["a", "b"]
    job = Job.objects.get(idempotency_key="a")
    assert (inserted[0].id, inserted[0].created_at) == (job.id, job.created_at)
    assert (job.payload, job.time_limit, job.max_attempts) == ({"key": "a"}, 1.5, 3)
    assert (job.retry_policy, job.delivery, job.run_at) == (
        {"delays": [1]},
        "at_least_once",
        rows[0].run_at,
    )
    assert (job.state, job.attempts, job.lease_token, job.claimed_by) == ("scheduled", 0, 0, "")
    assert (job.last_error, job.errors, job.result, job.lease_expires_at) == ("", [], None, None)


def test_job_schedule_returns_the_row_it_stored_or_the_one_with_its_key(store, monkeypatch):
    monkeypatch.setattr(services.jobs, "job_store", lambda: store)
    run_at = timezone.now() + dt.timedelta(minutes=5)
    job = services.job_schedule(handler=HANDLER, run_at=run_at, time_limit=3, payload={"n": 1})
    stored = Job.objects.get(id=job.id)
    assert model_to_dict(job) == model_to_dict(stored) and job.created_at == stored.created_at
    assert not job._state.adding
    again = services.job_schedule(handler=HANDLER, run_at=run_at, idempotency_key="once")
    other = services.job_schedule(handler=HANDLER, run_at=timezone.now(), idempotency_key="once")
    assert other.id == again.id and other.run_at == run_at


# The slice's members, given directly: the planner's real query is tested with it.
MEMBERS_SQL = """
    SELECT * FROM unnest(%(ids)s::bigint[], %(run_ats)s::timestamptz[]) AS m(id, run_at)"""


def test_a_member_slice_inserts_the_due_members_and_counts_the_missed(store):
    now = timezone.now()
    members = [(1, now + dt.timedelta(hours=1)), (2, now - dt.timedelta(hours=1))]
    members.append((3, now + dt.timedelta(hours=2)))
    JobFactory(idempotency_key="slice:3")
    template = JobTemplate(
        handler=HANDLER,
        payload={"task": 7},
        max_attempts=2,
        retry_policy={"delays": [5]},
        delivery="at_most_once",
        time_limit=4.0,
    )
    source = MemberSlice(
        template=template,
        key_prefix="slice:",
        not_before=now,
        members_sql=MEMBERS_SQL,
        members_params={"ids": [m for m, _ in members], "run_ats": [t for _, t in members]},
        members=lambda: members,
    )
    planned = store.insert_jobs(source)
    assert (planned.planned, planned.missed) == (1, 1)
    job = Job.objects.get(idempotency_key="slice:1")
    assert job.run_at == members[0][1] and job.payload == {"task": 7, "member_id": 1}
    assert (job.max_attempts, job.retry_policy, job.delivery, job.time_limit) == (
        2,
        {"delays": [5]},
        "at_most_once",
        4.0,
    )
    assert (job.state, job.attempts, job.errors) == ("scheduled", 0, [])
    assert (store.insert_jobs(source).planned, Job.objects.count()) == (0, 2)


@pytest.mark.skipif(not ON_POSTGRES, reason="reads a PostgreSQL cursor")
def test_postgres_rows_are_read_by_column_name():
    with connection.cursor() as cursor:
        cursor.cursor.row_factory = rows_of(Claim)
        cursor.execute("SELECT 2 AS token, 'mail' AS queue, 3.5 AS run_at_ms, 1 AS id")
        assert cursor.fetchone() == Claim(id=1, token=2, run_at_ms=3.5, queue="mail")
        with pytest.raises(LookupError):
            cursor.execute("SELECT 1 AS id, 2 AS token")


@pytest.mark.skipif(not ON_POSTGRES, reason="runs this file on SQLite (from PostgreSQL's run)")
def test_the_orm_store_on_a_sqlite_database(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'store.sqlite3'}"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__]
    result = subprocess.run(
        command, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]  # "N passed, M skipped in X s"
    assert " passed" in summary and "failed" not in summary, summary
