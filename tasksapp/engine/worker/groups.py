"""Transactional groups: the transactional jobs of a batch share one transaction.

One transaction per job costs two statements per job (its success and the commit); a
group costs them once for up to GROUP_JOBS jobs. Each job's effects sit in a
savepoint of its own, made before the handler's first statement (a handler that never
touches the database costs no round trip), so that a job that fails rolls back alone.
The group is kept short (a time, a count of savepoints) because it holds its jobs' row
locks and keeps their effects invisible until it commits; the count stays under
PostgreSQL's 64 cached subtransactions per transaction (more slow every snapshot on the
server). Jobs whose handlers touched no database cost no savepoint and hold nothing:
only the time bounds how many of them share a group."""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from django.db import DatabaseError, DataError, IntegrityError

from tasksapp.engine.db import on_postgres, tempo_atomic, tempo_connection
from tasksapp.engine.handlers import owns_transaction, resolve_handler
from tasksapp.engine.models import Delivery
from tasksapp.engine.store.pg_session import transaction_aborted
from tasksapp.engine.transitions import StartedJob, job_succeed
from tasksapp.engine.worker.attempt import begin, call, refuse_if_cancelled, run_one
from tasksapp.engine.worker.lease_keeper import LeaseKeeper
from tasksapp.engine.worker.outcomes import (
    WORKER_EXITS,
    RunOutcome,
    describe,
    record_failure,
    settle,
)
from tasksapp.engine.worker.start_rate import start_rates

log = logging.getLogger(__name__)

# Savepoints (jobs whose handlers ran statements) in one group at most: under
# PostgreSQL's 64 cached subtransactions per transaction.
GROUP_JOBS = 50
# A group waits this long at most for its next job's instant (jobs spread in time share a
# message): its finished jobs' effects are not held back waiting for company.
GROUP_WAIT_MS = 2.0
ERR_TRANSACTION_ABORTED = (
    "the handler returned after a database error it caught: its transaction was aborted"
)


class _GroupRefused(Exception):
    """The group's successes cannot all be recorded: its transaction rolls back."""

    def __init__(self, lost: set[int]) -> None:
        super().__init__(f"{len(lost)} of the group's leases were lost")
        self.lost = lost  # jobs another process owns now: their outcomes are dropped


def shares_transaction(job: StartedJob) -> bool:
    """Whether the job runs in a transaction shared with its batch's next jobs: a
    transactional job on PostgreSQL whose handler does not ask for its own, and whose
    queue has no rate limit (a start taken inside the group's transaction would hold the
    queue's start rate locked until the group commits)."""
    if job.delivery != Delivery.TRANSACTIONAL or not _on_postgres():
        return False
    return not owns_transaction(job.handler) and start_rates.limit_of(job.queue) is None


@functools.cache
def _on_postgres() -> bool:
    return on_postgres()


def run_group(first, take, keeper: LeaseKeeper, results: list) -> tuple | None:
    """Run transactional jobs (`first`, then what `take()` hands out) in one transaction,
    each in its own savepoint, and record their successes in one token-fenced statement
    before the commit. The group ends when GROUP_JOBS of its handlers ran
    statements (a job that touched no database holds nothing and is not counted), when
    TRANSACTION_GROUP_MS have passed since its first job finished, or before a job that
    would wait past that, or over GROUP_WAIT_MS, or must not share it; returns that job
    (None if none was taken).

    A failed job's savepoint rolls back alone and its failure commits with the group. If
    a success cannot be recorded (a lease lost: another process owns that job now; a
    result refused) the whole group rolls back, and its jobs still held run again, each
    in a transaction of its own."""
    settings, db = keeper.settings, tempo_connection()
    savepoints = _Savepoints(db)
    members: list[tuple[int, StartedJob, RunOutcome, Any]] = []
    item, closes, current = first, float("inf"), first[1]
    try:
        with tempo_atomic(), db.execute_wrapper(savepoints):
            while item is not None and _joins_group(item[1], closes, first=not members):
                index, current = item
                members.append((index, current, *_run_member(current, keeper, savepoints)))
                closes = min(closes, time.monotonic() + settings.transaction_group_ms / 1000)
                full = savepoints.made >= GROUP_JOBS
                item = None if full or time.monotonic() >= closes else take()
            _record_group_successes(members, worker=keeper.name)
    except _GroupRefused as refused:
        log.warning("a group of %s jobs rolled back (%s)", len(members), refused)
        _run_alone(members, refused.lost, keeper, results)
        return item
    except WORKER_EXITS as exc:  # the group rolled back: the others are left to their leases
        record_failure(current, describe(exc), kind="exception", began_ms=None)
        raise
    for index, _, status, _ in members:
        recorded = status is RunOutcome.SUCCESS_TO_RECORD
        results[index] = (RunOutcome.RECORDED_SUCCESS if recorded else status, None)
    return item


def _joins_group(job: StartedJob, closes: float, *, first: bool) -> bool:
    """Whether the job runs in the group: one that must wait for its instant longer than
    GROUP_WAIT_MS would hold the finished jobs' commit back, so they commit first."""
    if not shares_transaction(job):
        return False
    return first or job.begins_at <= min(closes, time.monotonic() + GROUP_WAIT_MS / 1000)


def _run_member(job: StartedJob, keeper: LeaseKeeper, savepoints) -> tuple[RunOutcome, Any]:
    """One job of a group: (SUCCESS_TO_RECORD, outcome) with its effects kept, or
    (FAILED | STOPPED, None) with its savepoint rolled back and its end recorded."""
    began_ms, callbacks = None, len(savepoints.db.run_on_commit)
    try:
        refuse_if_cancelled(job)
        handler = resolve_handler(job.handler)
        began_ms = begin(job)
        savepoints.arm()
        result = call(job, handler, began_ms, keeper, uncommitted=True)
        savepoints.check_usable()
        savepoints.release()
        return RunOutcome.SUCCESS_TO_RECORD, (job.id, job.token, result, began_ms)
    except BaseException as exc:  # noqa: BLE001 - the handler's own failure, SystemExit too
        savepoints.roll_back()
        del savepoints.db.run_on_commit[callbacks:]  # its on_commit callbacks go with it
        if isinstance(exc, WORKER_EXITS):
            raise
        return _settle_in_group(job, exc, began_ms), None


class _Savepoints:
    """The savepoint of each job of a group, made just before its handler's first
    statement: an execute wrapper on the group's connection, armed while a handler runs."""

    def __init__(self, db) -> None:
        self.db = db
        self.sid: str | None = None
        self.made = 0  # savepoints made: subtransactions of the group's transaction
        self._armed = False

    def arm(self) -> None:
        self.sid, self._armed = None, True

    def __call__(self, execute, sql, params, many, context):
        if self._armed:
            self._armed = False  # the SAVEPOINT statement passes through here too
            self.sid = self.db.savepoint()
            self.made += 1
        return execute(sql, params, many, context)

    def check_usable(self) -> None:
        """A handler that caught a database error and returned leaves its transaction
        aborted: that is its failure (its savepoint rolls back), not its neighbours'."""
        self._armed = False
        ran_statements = self.sid is not None
        if self.db.needs_rollback or (ran_statements and transaction_aborted(self.db)):
            raise DatabaseError(ERR_TRANSACTION_ABORTED)

    def release(self) -> None:
        if self.sid is not None:
            self.db.savepoint_commit(self.sid)
        self.sid = None  # used up: the next job's failure before its arm rolls back nothing

    def roll_back(self) -> None:
        # Without a savepoint the handler ran no statement: the transaction is as it was.
        self._armed, self.db.needs_rollback = False, False
        if self.sid is not None:
            self.db.savepoint_rollback(self.sid)
        self.sid = None


def _settle_in_group(job: StartedJob, exc: BaseException, began_ms: float | None) -> RunOutcome:
    """`settle` in the group's transaction, in a savepoint: a record the database refuses
    is logged and the job left to its lease, as outside a group."""
    try:
        with tempo_atomic():
            return settle(job, exc, began_ms)
    except (DataError, IntegrityError):
        log.exception("job %s: its end could not be recorded; its lease will expire", job.id)
        return RunOutcome.FAILED


def _record_group_successes(
    members: list[tuple[int, StartedJob, RunOutcome, Any]], *, worker: str
) -> None:
    """The group's successes in one statement, fenced by each job's token; `worker`'s
    record of the starts it deferred forgets them in the same statement."""
    outcomes = [
        outcome for *_, status, outcome in members if status is RunOutcome.SUCCESS_TO_RECORD
    ]
    if not outcomes:
        return
    try:
        done = job_succeed(outcomes=outcomes, worker=worker)
    except (DataError, IntegrityError) as exc:
        raise _GroupRefused(set()) from exc
    lost = {outcome[0] for outcome in outcomes} - done
    if lost:
        raise _GroupRefused(lost)


def _run_alone(members: list, lost: set[int], keeper: LeaseKeeper, results: list) -> None:
    """After a group rolled back: its jobs still held run again, each on its own."""
    for index, job, *_ in members:
        if job.id in lost:
            log.warning("job %s: lease lost while running; its outcome is discarded", job.id)
            results[index] = (RunOutcome.FAILED, None)
        else:
            results[index] = run_one(job, keeper)
