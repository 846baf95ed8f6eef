"""Transactional jobs of a batch in one transaction, a savepoint per job: run in-process
against real PostgreSQL (each commit real: the tests' database is not one transaction)."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.services import job_cancel
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker import groups
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.engine.worker.groups import ERR_TRANSACTION_ABORTED
from tests.engine.worker.test_executor import claim_and_run
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

RECORDING = "tests.handlers.recording."


@pytest.fixture(autouse=True)
def groups_without_a_time_bound(settings):
    """A group ends at its count only: these handlers are slow on a loaded machine."""
    settings.TEMPO_TUNING = {"TRANSACTION_GROUP_MS": 60_000}


def batch(*handlers: str) -> list[Job]:
    """Jobs of the given handlers, due together, in this order in their batch."""
    jobs = [JobFactory(handler=RECORDING + name) for name in handlers]
    assert claim_and_run(*jobs) == len(jobs)
    for job in jobs:
        job.refresh_from_db()
    return jobs


def committed_by(jobs: list[Job]) -> set[int]:
    """The transactions that wrote the jobs' rows last (their xmin; a row written in a
    savepoint has the savepoint's own)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT xmin::text::bigint FROM tasksapp_job WHERE id = ANY(%s)",
            [[job.id for job in jobs]],
        )
        return {row[0] for row in cursor.fetchall()}


def test_a_failed_job_rolls_back_only_itself_and_the_others_commit_together(effects):
    jobs = batch(
        "record",
        "record_then_fail",
        "record",
        "record_then_swallow_error",
        "not_json",
        "record_then_snooze",
        "record",
    )
    ok, raised, ok2, swallowed, not_json, snoozed, ok3 = jobs
    for job in (ok, ok2, ok3):
        assert job.state == JobState.SUCCEEDED and job.result == {"job": job.id}
        assert effects.count(job.id) == 1
    assert raised.state == JobState.FAILED
    assert raised.last_error == "RuntimeError: failed after its effect"
    assert swallowed.state == JobState.FAILED
    assert swallowed.last_error == f"DatabaseError: {ERR_TRANSACTION_ABORTED}"
    assert not_json.state == JobState.FAILED and "cannot be stored" in not_json.last_error
    assert snoozed.state == JobState.SCHEDULED and snoozed.attempts == 0
    for job in (raised, swallowed, snoozed):
        assert effects.count(job.id) == 0
    # One statement of the group's transaction recorded every success.
    assert len(committed_by([ok, ok2, ok3])) == 1


def test_a_group_holds_at_most_its_count_of_jobs(monkeypatch, effects):
    monkeypatch.setattr(groups, "GROUP_JOBS", 2)
    jobs = batch(*["record"] * 5)
    assert {job.state for job in jobs} == {JobState.SUCCEEDED}
    assert [effects.count(job.id) for job in jobs] == [1] * 5
    assert len(committed_by(jobs)) == 3


def test_a_group_of_one_is_a_transaction_per_job(monkeypatch, effects):
    monkeypatch.setattr(groups, "GROUP_JOBS", 1)
    jobs = batch("record", "record_then_fail", "record")
    assert [job.state for job in jobs] == [JobState.SUCCEEDED, JobState.FAILED, JobState.SUCCEEDED]
    assert [effects.count(job.id) for job in jobs] == [1, 0, 1]
    assert len(committed_by(jobs)) == 3


def savepoints_made(*handlers: str) -> tuple[list[Job], int]:
    with CaptureQueriesContext(connection) as queries:
        jobs = batch(*handlers)
    return jobs, sum(q["sql"].startswith("SAVEPOINT") for q in queries.captured_queries)


def test_a_job_alone_in_its_batch_commits_without_a_savepoint(effects):
    """Nothing can share its transaction: its effects and its success commit together
    without the two savepoint round trips, and a failure still rolls back its effects."""
    batch("record")  # the worker's first batch registers the worker (a savepoint of its own)
    (ok,), made = savepoints_made("record")
    assert ok.state == JobState.SUCCEEDED and effects.count(ok.id) == 1
    assert made == 0
    (failed,), made = savepoints_made("record_then_fail")
    assert failed.state == JobState.FAILED and effects.count(failed.id) == 0
    assert made == 0
    pair, made = savepoints_made("record", "record")  # a group: one savepoint a job
    assert [effects.count(job.id) for job in pair] == [1, 1]
    assert made == 2


def test_a_lease_lost_in_a_group_rolls_it_back_and_the_others_run_again_alone(effects):
    """The stolen job's success is refused by the fence: nothing of the group commits,
    its other jobs run again, each in its own transaction; one effect each."""
    first, stolen, last = batch("record", "steal_lease", "record")
    assert stolen.state == JobState.CLAIMED and stolen.lease_token == 2  # the new owner's
    assert effects.count(stolen.id) == 0
    for job in (first, last):
        assert job.state == JobState.SUCCEEDED and job.attempts == 1
        assert effects.count(job.id) == 1
    assert len(committed_by([first, last])) == 2


def batch_with_one_alone(*handlers: str) -> list[Job]:
    """`batch`, with `record_alone` a handler that owns its transaction."""
    from tasksapp.engine.handlers import registry
    from tests.handlers.recording import record

    registry.register(record, name="tests.handlers.recording.record_alone", own_transaction=True)
    try:
        return batch(*handlers)
    finally:
        registry.unregister("tests.handlers.recording.record_alone")


def test_a_handler_that_owns_its_transaction_commits_alone(effects):
    jobs = batch_with_one_alone("record", "record_alone", "record")
    assert {job.state for job in jobs} == {JobState.SUCCEEDED}
    first, alone, last = jobs
    # Its own transaction: the group ends before it (or, with helper threads, another
    # thread's group takes the jobs beside it), never one it shares.
    assert committed_by([alone]).isdisjoint(committed_by([first, last]))


def test_transactional_successes_leave_the_record_of_deferred_starts(effects):
    """A transactional success takes its job out of the worker's record of the starts it
    deferred in the statement that records it, in a group or committing alone, as an
    at-least-once success does: the record does not grow until a beat prunes it."""
    from tasksapp.engine.models import WorkerProcess
    from tasksapp.engine.worker.executor import lease_keeper

    jobs = batch_with_one_alone("record", "record", "record_alone")
    assert {job.state for job in jobs} == {JobState.SUCCEEDED}
    keeper = lease_keeper()
    assert keeper.defers_starts()
    assert not WorkerProcess.objects.get(name=keeper.name).held


@pytest.mark.parametrize("first", ["record", "record_then_snooze", "record_then_fail"])
def test_a_job_cancelled_before_its_start_undoes_nothing_of_the_job_before_it(effects, first):
    """A job refused at its start (cancelled after its claim) made no savepoint of its own:
    its end must not roll back to the savepoint of the job before it (it once did, undoing
    that job's recorded end, or failing on a savepoint already released)."""
    before, cancelled = (
        JobFactory(handler=RECORDING + first),
        JobFactory(handler=RECORDING + "record"),
    )
    claims = job_claim_due(ids=[before.id, cancelled.id], owner="d", ttl=10)
    job_cancel(job_id=cancelled.id)
    assert execute_batch([[c.id, c.token, c.run_at_ms] for c in claims]) == 2
    before.refresh_from_db()
    cancelled.refresh_from_db()
    expected = {"record": JobState.SUCCEEDED, "record_then_snooze": JobState.SCHEDULED}
    assert before.state == expected.get(first, JobState.FAILED)
    assert effects.count(before.id) == (1 if first == "record" else 0)
    assert cancelled.state == JobState.CANCELLED and effects.count(cancelled.id) == 0


def test_a_finished_job_does_not_wait_in_its_group_for_a_later_ones_instant(effects):
    """Jobs spread in time in one message: the first commits before the second's instant
    (GROUP_WAIT_MS), rather than holding its effects back for company."""
    now = timezone.now()
    first = JobFactory(handler=RECORDING + "record", run_at=now - dt.timedelta(milliseconds=10))
    later = JobFactory(handler=RECORDING + "record", run_at=now + dt.timedelta(milliseconds=80))
    together = JobFactory(handler=RECORDING + "record", run_at=later.run_at)
    assert claim_and_run(first, later, together) == 3
    jobs = [Job.objects.get(id=job.id) for job in (first, later, together)]
    assert [effects.count(job.id) for job in jobs] == [1, 1, 1]
    assert jobs[0].finished_at < jobs[1].run_at  # committed before the next instant
    assert len(committed_by(jobs[:1] + jobs[1:])) == 2
    assert len(committed_by(jobs[1:])) == 1  # due at one instant: one group
