"""A held job's phase (tasksapp/engine/worker/lease_keeper.py): where its handler is, and
whether its lease is renewed. Pure: no database, no threads."""

import datetime as dt

import pytest

from tasksapp.engine.store.rows import DatabaseTime, StartedJob
from tasksapp.engine.worker.lease_keeper import HeldJob, Phase

NOW = 1000.0
THREAD = 7


def held(limit: float = 5.0, **fields) -> HeldJob:
    job = StartedJob(
        id=1,
        token=1,
        handler="h",
        payload={},
        attempt=1,
        max_attempts=1,
        delivery="transactional",
        retry_policy={},
        idempotency_key="k",
        run_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        time_limit=limit,
        clock=DatabaseTime(read_ms=0.0, received=NOW, sent=NOW),
    )
    return HeldJob(job, limit, **fields)


def test_a_held_job_waits_until_its_handler_begins_then_its_limit_counts():
    job = held()
    assert job.phase is Phase.WAITING and job.renewable(NOW, set())
    assert not job.overdue_at(NOW + 3600)  # no limit counts before the handler begins
    job.begin(NOW, 12.5, THREAD)
    assert (job.phase, job.deadline, job.began_ms, job.thread) == (
        Phase.RUNNING,
        NOW + 5.0,
        12.5,
        THREAD,
    )
    assert job.renewable(NOW + 4.9, set()) and not job.overdue_at(NOW + 4.9)
    assert job.overdue_at(NOW + 5.0) and not job.renewable(NOW + 5.0, set())


@pytest.mark.parametrize(
    ("uncommitted", "phase"), [(False, Phase.RETURNED), (True, Phase.UNCOMMITTED)]
)
def test_a_returned_handler_has_no_limit_and_keeps_its_outcome(uncommitted, phase):
    job = held()
    job.begin(NOW, None, THREAD)
    job.end((1, 1, None, 0.0), uncommitted=uncommitted)
    assert job.phase is phase and job.outcome == (1, 1, None, 0.0)
    assert not job.overdue_at(NOW + 3600) and job.renewable(NOW + 3600, set())


def test_an_overdue_job_stays_overdue_when_its_handler_returns_and_is_renewed_no_more():
    job = held()
    job.begin(NOW, None, THREAD)
    job.pass_limit()
    job.end(None, uncommitted=False)
    assert job.phase is Phase.OVERDUE and not job.renewable(NOW, set())


def test_a_success_waiting_for_a_stuck_threads_commit_is_renewed_no_more():
    """Its group's commit runs on the thread of an overdue handler: it may never come."""
    job = held()
    job.begin(NOW, None, THREAD)
    job.end(None, uncommitted=True)
    assert not job.renewable(NOW, {THREAD})
    assert job.renewable(NOW, {THREAD + 1})


def test_a_deferred_start_is_not_renewed_its_claim_holds_it():
    job = held(start_due=NOW + 1)
    assert not job.renewable(NOW, set())
    job.start_due = None
    assert job.renewable(NOW, set())
