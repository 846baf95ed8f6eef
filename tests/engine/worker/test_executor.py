"""The worker side, run in-process against real PostgreSQL."""

import datetime as dt
import time

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from tasksapp.engine.models import Job, JobState, WorkerProcess
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker import executor, outcomes
from tasksapp.engine.worker import lease_keeper as keeper_module
from tasksapp.engine.worker.executor import execute_batch
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)
NOOP = "tests.handlers.recording.noop"


def claim_and_run(*jobs):
    claims = job_claim_due(ids=[j.id for j in jobs], owner="d", ttl=10)
    return execute_batch([[c.id, c.token, c.run_at_ms] for c in claims])


def slow_jobs(count):
    """Jobs whose handler takes 0.3 s, then records its effect."""
    return [
        JobFactory(handler="tests.handlers.recording.record_slowly", payload={"seconds": 0.3})
        for _ in range(count)
    ]


def test_transactional_job_runs_once_and_records_its_result(effects):
    job = JobFactory()
    assert claim_and_run(job) == 1
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.result == {"job": job.id}
    assert job.started_at >= job.run_at and job.finished_at >= job.started_at
    assert effects.count(job.id) == 1


def test_duplicate_message_does_not_start_the_job_twice(effects):
    job = JobFactory()
    (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)
    message = [[claim.id, claim.token, claim.run_at_ms]]
    assert execute_batch(message) == 1
    assert execute_batch(message) == 0
    assert effects.count(job.id) == 1


def test_lost_lease_rolls_back_a_transactional_handler(effects):
    job = JobFactory(handler="tests.handlers.recording.steal_lease")
    claim_and_run(job)
    job.refresh_from_db()
    assert job.state == JobState.CLAIMED and job.lease_token == 2  # the new owner's claim
    assert effects.count(job.id) == 0


def test_failure_schedules_the_next_attempt_from_the_policy(effects):
    job = JobFactory(
        handler="tests.handlers.recording.fail_until",
        payload={"succeed_on": 3},
        retry_policy={"delays": [1, 2, 5, 10, 20]},
    )
    before = timezone.now()
    claim_and_run(job)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.attempts == 1
    assert job.last_error == "RuntimeError: attempt 1 fails"
    assert (
        before + dt.timedelta(seconds=1) <= job.run_at <= timezone.now() + dt.timedelta(seconds=1)
    )


def test_dead_after_max_attempts_with_the_last_error(effects):
    job = JobFactory(
        handler="tests.handlers.recording.fail_until", max_attempts=3, retry_policy={"delays": [0]}
    )
    for _attempt in range(3):
        Job.objects.filter(id=job.id).update(run_at=timezone.now() - dt.timedelta(seconds=1))
        job.refresh_from_db()
        claim_and_run(job)
    job.refresh_from_db()
    assert job.state == JobState.DEAD and job.attempts == 3
    assert job.last_error == "RuntimeError: attempt 3 fails"
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]
    assert effects.count(job.id) == 0


def test_retry_then_success(effects):
    job = JobFactory(
        handler="tests.handlers.recording.fail_until",
        payload={"succeed_on": 2},
        retry_policy={"delays": [0]},
    )
    claim_and_run(job)
    Job.objects.filter(id=job.id).update(run_at=timezone.now() - dt.timedelta(seconds=1))
    job.refresh_from_db()
    claim_and_run(job)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.attempts == 2
    assert effects.count(job.id) == 1


def test_time_limit_fails_the_attempt_and_rolls_back(effects):
    job = JobFactory(
        handler="tests.handlers.recording.record_slowly",
        payload={"seconds": 0.3},
        time_limit=0.1,
        max_attempts=1,
    )
    claim_and_run(job)
    job.refresh_from_db()
    assert job.state == JobState.DEAD
    assert job.last_error.startswith("time limit of 0.1 s exceeded")
    assert effects.count(job.id) == 0


def test_non_json_result_is_a_failure(effects):
    job = JobFactory(handler="tests.handlers.recording.not_json", max_attempts=1)
    claim_and_run(job)
    job.refresh_from_db()
    assert job.state == JobState.DEAD
    assert "result must be JSON-serialisable" in job.last_error


@pytest.mark.parametrize("delivery", ["at_least_once", "at_most_once"])
def test_non_transactional_batch_is_completed_in_bulk(delivery):
    jobs = [
        JobFactory(handler="tests.handlers.recording.echo", delivery=delivery, payload={"i": i})
        for i in range(20)
    ]
    assert claim_and_run(*jobs) == 20
    done = Job.objects.filter(state=JobState.SUCCEEDED)
    assert done.count() == 20
    job = done.get(id=jobs[3].id)
    assert job.result == {"payload": {"i": 3}, "attempt": 1, "key": job.idempotency_key}


def test_a_batch_can_run_its_handlers_side_by_side(settings, effects):
    settings.TEMPO = {**settings.TEMPO, "BATCH_PARALLELISM": 5}
    jobs = slow_jobs(5)
    assert claim_and_run(*jobs) == 5
    assert Job.objects.filter(state=JobState.SUCCEEDED).count() == 5
    assert effects.count() == 5
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM max(executed_at) - min(executed_at)) FROM test_effects"
        )
        spread = cursor.fetchone()[0]
    assert spread < 0.9  # one after another, the five 0.3 s handlers would span 1.2 s


def test_the_claim_carries_run_at_to_the_microsecond():
    run_at = timezone.now() + dt.timedelta(milliseconds=500, microseconds=250)
    job = JobFactory(run_at=run_at)
    (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)
    job.refresh_from_db()
    assert claim.run_at_ms == pytest.approx(job.run_at.timestamp() * 1000, abs=0.001)


def test_a_batch_that_arrives_early_is_started_at_once_and_runs_at_run_at(effects):
    """The start happens on arrival; the handler waits for run_at by the database clock:
    its effect, stamped by the database, is never before run_at and just after it."""
    job = JobFactory(run_at=timezone.now() + dt.timedelta(milliseconds=300))
    (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)
    arrived = time.monotonic()
    assert execute_batch([[claim.id, claim.token, claim.run_at_ms]]) == 1
    assert time.monotonic() - arrived > 0.25  # it waited
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.attempts == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT executed_at FROM test_effects WHERE job_id = %s", [job.id])
        (executed_at,) = cursor.fetchone()
    assert job.run_at <= job.started_at <= executed_at
    # How soon after run_at is bench.lag's to measure; here: at run_at, not a poll later.
    assert executed_at - job.run_at < dt.timedelta(seconds=1)


def test_a_failure_records_when_the_handler_began(effects):
    job = JobFactory(
        handler="tests.handlers.recording.fail_until",
        run_at=timezone.now() + dt.timedelta(milliseconds=200),
        max_attempts=1,
    )
    claim_and_run(job)
    job.refresh_from_db()
    assert job.state == JobState.DEAD
    assert job.run_at <= job.started_at < job.run_at + dt.timedelta(seconds=1)


def test_side_by_side_never_runs_more_handlers_than_the_parallelism(settings, effects):
    settings.TEMPO = {**settings.TEMPO, "BATCH_PARALLELISM": 3}
    jobs = slow_jobs(6)
    assert claim_and_run(*jobs) == 6
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM executed_at) FROM test_effects ORDER BY 1")
        ends = [float(row[0]) for row in cursor.fetchall()]
    assert len(ends) == 6
    assert ends[2] - ends[0] < 0.5  # the first three side by side (one by one: 0.6 s)
    assert ends[3] - ends[2] > 0.2  # the fourth waited for a free thread


def test_an_outcome_that_cannot_be_recorded_leaves_the_lease_to_expire(monkeypatch, effects):
    """The database goes away before the success is written: the worker stops renewing
    the lease (the reaper then returns the job) instead of holding it forever."""
    job = JobFactory(delivery="at_least_once")
    (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)

    def database_gone(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(outcomes, "job_succeed", database_gone)
    with pytest.raises(OperationalError):
        execute_batch([[claim.id, claim.token, claim.run_at_ms]])
    assert job.id not in executor.lease_keeper()._held
    job.refresh_from_db()
    assert job.state == JobState.RUNNING  # until its lease expires


def run_in_background(*jobs):
    """execute_batch on a thread of its own (a handler of the batch blocks); joined by
    the returned function."""
    import threading

    from django.db import connection as thread_connection

    claims = job_claim_due(ids=[j.id for j in jobs], owner="d", ttl=10)

    def run():
        try:
            execute_batch([[c.id, c.token, c.run_at_ms] for c in claims])
        finally:
            thread_connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return lambda: thread.join(timeout=10)


def test_a_job_without_a_time_limit_runs_under_the_default(settings, effects):
    settings.TEMPO = {**settings.TEMPO, "DEFAULT_TIME_LIMIT_SECONDS": 0.1}
    job = JobFactory(
        handler="tests.handlers.recording.record_slowly", payload={"seconds": 0.3}, max_attempts=1
    )
    assert job.time_limit is None
    claim_and_run(job)
    job.refresh_from_db()
    assert job.state == JobState.DEAD
    assert job.last_error.startswith("time limit of 0.1 s exceeded")
    assert effects.count(job.id) == 0


def test_a_handler_past_its_limit_fails_at_the_limit_while_its_thread_goes_on(effects):
    """In a threads worker the watchdog records the failure at the limit (the thread
    cannot be stopped); its lease is no longer renewed; the late return changes nothing."""
    job = JobFactory(
        handler="tests.handlers.recording.record_slowly",
        payload={"seconds": 1.5},
        time_limit=0.3,
        max_attempts=1,
    )
    began = time.monotonic()
    join = run_in_background(job)
    for _ in range(100):
        job.refresh_from_db()
        if job.state not in (JobState.CLAIMED, JobState.RUNNING):
            break
        time.sleep(0.02)
    assert job.state == JobState.DEAD
    assert time.monotonic() - began < 1.4  # at the limit, not when the handler returned
    assert "its worker process" not in job.last_error
    assert job.last_error.startswith("time limit of 0.3 s exceeded: the handler was still")
    assert job.errors[-1]["kind"] == "time_limit"
    keeper = executor.lease_keeper()
    keeper._renew_and_beat()  # past its limit the lease is left alone
    job.refresh_from_db()
    assert job.lease_expires_at is None and job.state == JobState.DEAD
    join()
    job.refresh_from_db()
    assert job.state == JobState.DEAD and len(job.errors) == 1
    assert effects.count(job.id) == 0  # the late return rolled back


def test_a_prefork_child_past_a_limit_records_settles_its_batch_and_ends(monkeypatch):
    """In a prefork child the watchdog records the time limit's failure (retry no sooner
    than the margin), records the batch's waiting successes, hands back the jobs whose
    handlers never began (their attempt not counted) and ends the process."""
    import threading

    ended = threading.Event()
    monkeypatch.setattr(keeper_module, "_ends_process", True)
    monkeypatch.setattr(keeper_module.os, "_exit", lambda code: ended.set())
    keeper_module.stop_lease_keeper()
    hung = JobFactory(
        handler="tests.handlers.recording.record_slowly",
        payload={"seconds": 1.0},
        time_limit=0.3,
        delivery="at_least_once",
        retry_policy={"delays": [0]},
    )
    others = [
        JobFactory(handler="tests.handlers.recording.echo", delivery="at_least_once")
        for _ in range(4)
    ]
    join = run_in_background(hung, *others)
    assert ended.wait(timeout=5)
    hung.refresh_from_db()
    assert hung.state == JobState.FAILED and hung.attempts == 1
    assert hung.last_error == (
        "time limit of 0.3 s exceeded: the handler was still running; its worker process was ended"
    )
    assert hung.run_at - hung.finished_at >= dt.timedelta(seconds=0.99)  # the margin
    for job in others:
        job.refresh_from_db()
        ran = job.state == JobState.SUCCEEDED and job.attempts == 1
        handed_back = job.state == JobState.SCHEDULED and job.attempts == 0
        assert ran or handed_back, (job.state, job.attempts)
        assert job.lease_expires_at is None and job.claimed_by == ""
    join()  # (the process was not really ended: its late outcomes are fenced off)
    hung.refresh_from_db()
    assert hung.state == JobState.FAILED and len(hung.errors) == 1


@pytest.mark.parametrize("delivery", ["at_least_once", "at_most_once"])
def test_successes_are_recorded_on_a_new_connection_after_the_database_came_back(
    monkeypatch, effects, delivery
):
    """A restart between the handler and the record: the worker reconnects and records
    the success, instead of leaving the job to run again or end `lost`."""
    job = JobFactory(handler="tests.handlers.recording.echo", delivery=delivery)
    (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)
    real, failures = outcomes.job_succeed, []

    def away_twice(**kwargs):
        if len(failures) < 2:
            failures.append(1)
            raise OperationalError("server closed the connection unexpectedly")
        return real(**kwargs)

    monkeypatch.setattr(outcomes, "job_succeed", away_twice)
    assert execute_batch([[claim.id, claim.token, claim.run_at_ms]]) == 1
    job.refresh_from_db()
    assert (job.state, job.attempts, len(failures)) == (JobState.SUCCEEDED, 1, 2)


def test_a_beat_prunes_the_record_of_deferred_starts_only_while_there_may_be_one():
    """A batch's deferred starts are recorded on the worker's row. Their successes take
    them out of it at once; a job that failed stays in it until the next beat empties
    the record, and later beats leave the row alone until some start is deferred again."""
    from django.test.utils import CaptureQueriesContext

    from tasksapp.engine.models import WorkerProcess

    keeper = executor.lease_keeper()

    def beat_prunes() -> bool:
        with CaptureQueriesContext(connection) as queries:
            keeper._renew_and_beat()
        return any("SET held" in query["sql"] for query in queries)

    def record():
        return WorkerProcess.objects.get(name=keeper.name).held

    def short_jobs(handler=NOOP):
        return JobFactory.create_batch(2, delivery="at_least_once", handler=handler)

    assert claim_and_run(*short_jobs()) == 2
    assert keeper.defers_starts() and record() is None  # the successes left the record
    failing = short_jobs("tests.handlers.recording.fail_until")
    assert claim_and_run(*failing) == 2
    assert set(record()) == {str(job.id) for job in failing}
    assert beat_prunes() and record() is None
    assert not beat_prunes()
    assert claim_and_run(*short_jobs("tests.handlers.recording.fail_until")) == 2
    assert beat_prunes() and record() is None


def test_the_heartbeat_reports_the_slowest_handler_for_dispatchers_to_pack_messages():
    fast = JobFactory(handler=NOOP, delivery="at_least_once")
    slow = JobFactory(
        handler="tests.handlers.recording.record_slowly",
        payload={"seconds": 0.2},
        delivery="at_least_once",
    )
    assert claim_and_run(fast, slow) == 2
    keeper = executor.lease_keeper()
    keeper._renew_and_beat()  # as its thread does every third of the lease
    reported = WorkerProcess.objects.get(name=keeper.name).slowest_handler_ms
    assert 200 <= reported < 5_000  # the slow one's, in ms, not the fast one's
