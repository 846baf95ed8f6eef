"""The engine's state transitions. Each has exactly one owning function here.

Every transition is one conditional UPDATE guarded on the current state and, once a job
was claimed, on its fencing token: a process that lost its lease can never start,
finish, fail or re-run the job. The job store (tasksapp.engine.store) runs them: on
PostgreSQL as batch statements with the database clock; on other databases (the embedded
SQLite mode) as the same guards through the ORM inside one transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.models import JobState
from tasksapp.engine.ratelimit import gcra_allowance, gcra_batch, gcra_burst, gcra_next_start_ms
from tasksapp.engine.store import job_store
from tasksapp.engine.store.rows import (
    Claim,
    DatabaseTime,
    DueJob,
    FailedAttempt,
    PollWindow,
    QueueLimits,
    Reaped,
    Renewed,
    StartedJob,
)

__all__ = [
    "LEASE_EXPIRED_ERROR",
    "LOST_RUN_ERROR",
    "START_LEAD_SECONDS",
    "Claim",
    "DatabaseTime",
    "DueJob",
    "StartedJob",
    "database_time",
    "job_cancel_running",
    "LimitedClaim",
    "job_claim_due",
    "job_claim_limited",
    "job_fail",
    "job_poll_due",
    "job_reap_expired",
    "job_expire_claims_of_dead_dispatchers",
    "job_expire_lost_claims",
    "job_release",
    "job_renew",
    "job_snooze",
    "job_start",
    "job_succeed",
]

LEASE_EXPIRED_ERROR = "worker lost: lease expired before the job finished"
LOST_RUN_ERROR = (
    "worker lost: lease expired before the job finished; its transaction rolled back, "
    "so it runs again and the attempt is not counted"
)
START_LEAD_SECONDS = 1.0  # a job is started at most this long before its run time
ERROR_MAX_CHARS = 4000  # of an error message kept in last_error and errors
TRACEBACK_MAX_CHARS = 8000  # of a failed attempt's traceback: its end (the raise) kept
TRACEBACK_CUT = "[… {n} characters before]\n"


# --- dispatcher side -------------------------------------------------------------------


def job_poll_due(
    *,
    lookahead: float,
    partitions: int,
    owned: Sequence[int],
    limit: int,
    after: tuple[dt.datetime, int] | None = None,
) -> list[DueJob]:
    """Pending jobs due before now + lookahead in the owned partitions, ordered by
    (run_at, id), starting after the keyset `after` = (run_at, id) of a previous page."""
    return job_store().poll_due(PollWindow(lookahead, partitions, owned, limit, after))


def job_claim_due(*, ids: Sequence[int], owner: str, ttl: float, lead: float = 1.0) -> list[Claim]:
    """scheduled|failed → claimed, in one statement. Returns the claims this caller won."""
    if not ids:
        return []
    return job_store().claim_due(ids=ids, owner=owner, ttl=ttl, lead=lead)


@dataclass(frozen=True)
class LimitedClaim:
    """A limited queue's claim: the claims won, the ids still due but held back by a
    limit, and when its rate limit lets the next job start (database ms; None: no rate
    limit holds it back now)."""

    claims: list[Claim]
    held: list[int]
    next_start_ms: float | None = None


def job_claim_limited(
    *, queue: str, ids: Sequence[int], owner: str, ttl: float, room: int, lead: float = 1.0
) -> LimitedClaim:
    """scheduled|failed → claimed for due ids of one limited queue, within its limits,
    which are counted in the database under the queue row's lock: however many
    dispatchers claim at once, no limit is exceeded (one that finds the lock taken claims
    nothing and holds every id). A rate limit moves its state on by the claims made
    (GCRA)."""
    store = job_store()
    with tempo_atomic():
        limits = store.lock_queue(queue)
        if limits is None:  # another dispatcher claims this queue now: all held, try again
            return LimitedClaim([], list(ids))
        if limits.rate_limit is not None:
            room, _ = _rate_allowance(limits, room)
        claimed = store.claim_limited(
            queue=queue, ids=ids, owner=owner, ttl=ttl, lead=lead, room=room, limits=limits
        )
        if limits.rate_limit is None:
            return LimitedClaim(claimed.claims, claimed.held)
        _, tat_ms = _rate_allowance(limits, len(claimed.claims))
        if claimed.claims:
            store.set_rate_tat(queue, tat_ms)
    next_start = gcra_next_start_ms(
        tat_ms=tat_ms,
        limit=limits.rate_limit,
        period_ms=limits.rate_period * 1000,
        starts=gcra_batch(limits.rate_limit),
    )
    return LimitedClaim(claimed.claims, claimed.held, next_start)


def _rate_allowance(limits: QueueLimits, wanted: int) -> tuple[int, float]:
    return gcra_allowance(
        tat_ms=limits.rate_tat_ms,
        now_ms=limits.now_ms,
        limit=limits.rate_limit,
        period_ms=limits.rate_period * 1000,
        wanted=wanted,
    )


def job_reap_expired(
    *,
    partitions: int,
    owned: Sequence[int],
    waiting: Sequence[int] = (),
    ttl: float = 0.0,
) -> Reaped:
    """Return expired leases in the owned partitions: how many, those due again at once,
    and the next expiry (ms) there. An unstarted claim among `waiting` (its message may
    still wait in the broker) keeps its claim and token, its lease renewed for `ttl` s."""
    return job_store().reap_expired(
        partitions=partitions,
        owned=owned,
        error=LEASE_EXPIRED_ERROR,
        lost_run_error=LOST_RUN_ERROR,
        waiting=waiting,
        ttl=ttl,
    )


def job_expire_claims_of_dead_dispatchers() -> int:
    """End the leases of the unstarted claims of dispatchers that died: the reaper returns
    them now, not when their leases would have run out."""
    return job_store().expire_claims_of_dead_dispatchers()


def job_expire_lost_claims(*, owner: str, waiting: Sequence[int], settle: float) -> int:
    """After a worker's death: end the leases of `owner`'s claims its messages no longer
    carry to anyone (taken by the dead worker, never started)."""
    return job_store().expire_lost_claims(owner=owner, waiting=waiting, settle=settle)


def job_expire_dead_workers(*, grace: float) -> list[str]:
    """End the leases of the running jobs of workers that died (their liveness lock is
    gone): the reaper returns them now, not when their leases would have run out."""
    return job_store().expire_dead_workers(grace=grace)


# --- worker side -----------------------------------------------------------------------


def queue_rate_limits() -> dict[str, tuple[int, float]]:
    """Each rate-limited queue's (starts, period in s)."""
    return job_store().rate_limits()


def queue_take_start(*, queue: str, limit: int, period: float) -> float:
    """Reserve the next start of a rate-limited queue at its rate, counted at the start
    as its claims are at the claim (GCRA, the same bucket of a quarter of the limit);
    the seconds to wait for it (0: at once)."""
    return job_store().take_start(queue=queue, interval=period / limit, burst=gcra_burst(limit))


def job_start(
    *,
    claims: Sequence[tuple[int, int]],
    worker: str,
    ttl: float,
    defer_starts: bool = False,
) -> list[StartedJob]:
    """claimed → running for each (id, token) still holding its claim and due within
    START_LEAD_SECONDS. The handler must not begin before `StartedJob.begins_at`.
    `defer_starts`: those not at-most-once stay claimed, held by `worker` (its row
    records them), their start written later by `job_start_held` or with their end."""
    if not claims:
        return []
    return job_store().start(
        claims=claims,
        worker=worker,
        ttl=ttl,
        lead=START_LEAD_SECONDS,
        defer_starts=defer_starts,
    )


def job_start_held(
    *, began: Sequence[tuple[int, int, float | None]], worker: str, ttl: float
) -> Renewed:
    """The deferred starts of jobs (id, token, began_ms) still running: claimed →
    running, leased for `ttl` s; the answer names those an operator asked to cancel."""
    if not began:
        return Renewed(0, frozenset())
    return job_store().start_held(began=began, worker=worker, ttl=ttl)


def job_prune_held(*, worker: str) -> None:
    """Forget the held jobs of `worker` that are no longer claimed."""
    job_store().prune_held(worker=worker)


def database_time() -> DatabaseTime:
    """One round trip's lower bound of the database clock (this machine's without
    PostgreSQL)."""
    return job_store().database_time()


def job_succeed(
    *, outcomes: Iterable[tuple[int, int, Any, float | None]], worker: str = ""
) -> set[int]:
    """running → succeeded for each (id, token, result, began_ms) still holding its lease;
    began_ms, when the handler began (database time, ms), replaces the planned start. A
    job whose start was deferred (still claimed) is started and ended in this one update,
    `worker` recorded as the one that ran it."""
    outcomes = list(outcomes)
    if not outcomes:
        return set()
    return job_store().succeed(outcomes=outcomes, worker=worker)


def job_fail(
    *,
    job_id: int,
    token: int,
    error: str,
    kind: str,
    retry_in: float | None,
    began_ms: float | None = None,
    traceback: str | None = None,
) -> bool:
    """running → failed (retry after `retry_in` s) or → dead (`retry_in` is None); the
    attempt's error entry keeps `traceback` (its last TRACEBACK_MAX_CHARS), if given."""
    state = JobState.DEAD if retry_in is None else JobState.FAILED
    attempt = FailedAttempt(
        job_id,
        token,
        state,
        error[:ERROR_MAX_CHARS],
        kind,
        retry_in,
        began_ms,
        None if traceback is None else traceback_tail(traceback),
    )
    return job_store().fail(attempt)


def traceback_tail(text: str) -> str:
    """A traceback within TRACEBACK_MAX_CHARS: its end, where the exception was raised,
    after a line saying how much was cut."""
    if len(text) <= TRACEBACK_MAX_CHARS:
        return text
    kept = TRACEBACK_MAX_CHARS - len(TRACEBACK_CUT.format(n=len(text)))  # the longest marker
    return TRACEBACK_CUT.format(n=len(text) - kept) + text[-kept:]


def job_release(*, leases: Sequence[tuple[int, int]]) -> int:
    """running → scheduled for jobs (id, token) whose handler never began (their worker
    process must end first): due again at once, the attempt not counted."""
    if not leases:
        return 0
    return job_store().release(leases=leases)


def job_renew(*, leases: Sequence[tuple[int, int]], ttl: float) -> Renewed:
    """Extend the leases of running jobs this process still holds; the answer names
    those an operator asked to cancel meanwhile."""
    if not leases:
        return Renewed(0, frozenset())
    return job_store().renew(leases=leases, ttl=ttl)


def job_cancel_running(
    *, job_id: int, token: int, began_ms: float | None = None, reason: str | None = None
) -> bool:
    """running → cancelled: the handler stopped at a cancel request, or never began (a
    check before it cancelled it); `reason`, when given, joins the job's history."""
    return job_store().cancel_running(job_id=job_id, token=token, began_ms=began_ms, reason=reason)


def job_snooze(*, job_id: int, token: int, delay: float) -> bool:
    """running → scheduled, due again in `delay` s; the attempt is not counted."""
    return job_store().snooze(job_id=job_id, token=token, delay=delay)
