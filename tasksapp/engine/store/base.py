"""What every job store does: the engine's bulk reads and writes of jobs.

Every write that changes `state` is guarded on the expected state and, after a claim, on
the fencing token (`lease_token`): a process that lost its lease changes nothing. The
callers (tasksapp.engine.transitions) never pass empty batches.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Protocol, overload

from django.db.models import F
from django.db.models.functions import Greatest, Now

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.models.jobs import DUE_STATES, LEASED_STATES, RETRYABLE_STATES

from . import rows

LEASE_EXPIRED_KIND = "lease_expired"  # the error entry of a running job whose lease expired
# A transactional run whose lease expired committed nothing (its transaction rolled back
# with its worker): it runs again without using up an attempt, recorded with this kind,
# at most FREE_LOST_RUNS times a job (a handler that kills its worker still ends).
LOST_RUN_KIND = "lost_run"
FREE_LOST_RUNS = 3


class JobStore(Protocol):
    def configure_session(self, connection: Any) -> None:
        """Set up a new session of a dispatcher or worker (asynchronous commits)."""
        ...

    def flush_commits(self) -> None:
        """Return once every earlier commit of this session is durable."""
        ...

    def poll_due(self, window: rows.PollWindow) -> list[rows.DueJob]:
        """Scheduled or failed jobs in the window, ordered by (run_at, id)."""
        ...

    def claim_due(
        self, *, ids: Sequence[int], owner: str, ttl: float, lead: float
    ) -> list[rows.Claim]:
        """scheduled|failed → claimed for the ids due within `lead` s; the claims won."""
        ...

    def lock_queue(self, queue: str) -> rows.QueueLimits | None:
        """Lock a queue's row until the transaction ends (claims of a limited queue are
        serialised by it) and read its limits; None if another session holds the lock
        (or the queue has no row)."""
        ...

    def claim_limited(
        self,
        *,
        queue: str,
        ids: Sequence[int],
        owner: str,
        ttl: float,
        lead: float,
        room: int,
        limits: rows.QueueLimits,
    ) -> rows.LimitedClaims:
        """Like claim_due for the ids of one limited queue (its row locked): at most `room`,
        within its concurrency and per-key limits, highest priority first."""
        ...

    def set_rate_tat(self, queue: str, tat_ms: float) -> None:
        """Store the queue's rate limit state (its row locked)."""
        ...

    def take_start(self, *, queue: str, interval: float, burst: int) -> float:
        """Reserve the next start of a rate-limited queue (GCRA: one start every
        `interval` s, at most `burst` at once), atomically however many workers start at
        once; the seconds to wait for it (0: at once)."""
        ...

    def rate_limits(self) -> dict[str, tuple[int, float]]:
        """Each rate-limited queue's (limit, period in s)."""
        ...

    def reap_expired(
        self,
        *,
        partitions: int,
        owned: Sequence[int],
        error: str,
        lost_run_error: str = "",
        waiting: Sequence[int] = (),
        ttl: float = 0.0,
    ) -> rows.Reaped:
        """Expired leases in the owned partitions: claimed → scheduled; running → lost,
        dead or failed (with `error`) per delivery mode and attempts, but a transactional
        run → scheduled with its attempt given back (with `lost_run_error`, a LOST_RUN_KIND
        entry) while it has fewer than FREE_LOST_RUNS of them. A claimed job among
        `waiting` (its message may still wait in the broker) keeps its claim and token,
        its lease renewed for `ttl` s, unless an operator asked to cancel it."""
        ...

    def expire_dead_workers(self, *, grace: float) -> list[str]:
        """End at once the leases of the running jobs of worker processes whose liveness
        lock is gone (they died), unless the server started within `grace` s; the names
        of the workers found dead (each is reported once)."""
        ...

    def retry(self, *, ids: Sequence[int], run_at: dt.datetime | None = None) -> int:
        """An operator's retry: dead|lost|cancelled|failed → scheduled (OperatorTransitions)."""
        ...

    def cancel_waiting(self, *, ids: Sequence[int]) -> int: ...
    def request_cancel(self, *, ids: Sequence[int]) -> int: ...
    def run_now(self, *, ids: Sequence[int]) -> int: ...

    def expire_claims_of_dead_dispatchers(self) -> int:
        """End at once the leases of the unstarted claims of dispatchers whose
        coordination lock is gone (they died, perhaps before publishing), unless a worker
        holds them: the reaper returns them now. How many."""
        ...

    def expire_lost_claims(self, *, owner: str, waiting: Sequence[int], settle: float) -> int:
        """After a worker's death: end at once the leases of `owner`'s unstarted claims
        made over `settle` s ago whose messages no longer wait in the broker (`waiting`
        may), unless a worker holds them. How many."""
        ...

    def start(
        self,
        *,
        claims: Sequence[tuple[int, int]],
        worker: str,
        ttl: float,
        lead: float,
        defer_starts: bool = False,
    ) -> list[rows.StartedJob]:
        """claimed → running for each (id, token) due within `lead` s. With
        `defer_starts`, all but the at-most-once jobs are only read (`start_written`
        false) and recorded as held on the worker's row; a store without liveness locks
        starts them all."""
        ...

    def start_held(
        self, *, began: Sequence[tuple[int, int, float | None]], worker: str, ttl: float
    ) -> rows.Renewed:
        """The deferred starts of (id, token, began_ms) jobs still claimed: → running,
        with a run lease of `ttl` s; which of them an operator asked to cancel."""
        ...

    def prune_held(self, *, worker: str) -> None:
        """Drop from the worker's held jobs those no longer claimed."""
        ...

    def succeed(
        self, *, outcomes: Sequence[tuple[int, int, Any, float | None]], worker: str = ""
    ) -> set[int]:
        """running (or claimed, its start deferred: counted now) → succeeded for each
        (id, token, result, began_ms); the ids finished."""
        ...

    def fail(self, attempt: rows.FailedAttempt) -> bool:
        """running → the attempt's state, if the job still holds its token."""
        ...

    def renew(self, *, leases: Sequence[tuple[int, int]], ttl: float) -> rows.Renewed:
        """Extend the leases of running jobs still held by (id, token); which of them an
        operator asked to cancel."""
        ...

    def cancel_running(
        self, *, job_id: int, token: int, began_ms: float | None, reason: str | None = None
    ) -> bool:
        """running → cancelled, if the job still holds its token; a `reason` is appended
        to its history as a `cancelled` event."""
        ...

    def snooze(self, *, job_id: int, token: int, delay: float) -> bool:
        """running → scheduled, due in `delay` s, the attempt given back, the snooze in
        its history; if the job still holds its token."""
        ...

    def release(self, *, leases: Sequence[tuple[int, int]]) -> int:
        """Running jobs (id, token) whose handler never began → scheduled, the start's
        attempt given back."""
        ...

    def database_time(self) -> rows.DatabaseTime:
        """One round trip's lower bound of the database clock."""
        ...

    @overload
    def insert_jobs(self, source: Sequence[rows.NewJob]) -> list[rows.InsertedJob]: ...

    @overload
    def insert_jobs(self, source: rows.MemberSlice) -> rows.PlannedSlice: ...

    def insert_jobs(
        self, source: Sequence[rows.NewJob] | rows.MemberSlice
    ) -> list[rows.InsertedJob] | rows.PlannedSlice:
        """Insert new jobs, skipping idempotency keys already taken: the given rows (the
        ones inserted come back), or a member slice (how many were planned and missed)."""
        ...


class InsertsBySource:
    """The one `insert_jobs` of both backends: rows or a member slice, each backend
    inserting them its own way (`_insert_rows`, `_insert_slice`)."""

    def insert_jobs(
        self, source: Sequence[rows.NewJob] | rows.MemberSlice
    ) -> list[rows.InsertedJob] | rows.PlannedSlice:
        if isinstance(source, rows.MemberSlice):
            return self._insert_slice(source)
        return self._insert_rows(source)

    def _insert_rows(self, jobs: Sequence[rows.NewJob]) -> list[rows.InsertedJob]:
        raise NotImplementedError

    def _insert_slice(self, source: rows.MemberSlice) -> rows.PlannedSlice:
        raise NotImplementedError


class OperatorTransitions:
    """The operator's transitions (retry, cancel, run now), the same on both backends:
    set-based, each guarded on the states it may change, every time the database's
    (`Now()`), as for the engine's own transitions. Their one caller is
    tasksapp.engine.services."""

    def retry(self, *, ids: Sequence[int], run_at: dt.datetime | None = None) -> int:
        """dead|lost|cancelled|failed → scheduled at `run_at` (None: now), with one more
        attempt allowed than used; how many moved."""
        return Job.objects.filter(state__in=RETRYABLE_STATES, id__in=ids).update(
            state=JobState.SCHEDULED,
            run_at=Now() if run_at is None else run_at,
            finished_at=None,
            claimed_by="",
            lease_expires_at=None,
            cancel_requested_at=None,
            max_attempts=Greatest(F("max_attempts"), F("attempts") + 1),
        )

    def cancel_waiting(self, *, ids: Sequence[int]) -> int:
        """scheduled|failed → cancelled; how many."""
        return Job.objects.filter(state__in=DUE_STATES, id__in=ids).update(
            state=JobState.CANCELLED, finished_at=Now(), lease_expires_at=None
        )

    def request_cancel(self, *, ids: Sequence[int]) -> int:
        """A cancel asked of each claimed or running job not asked yet; how many."""
        asked = Job.objects.filter(
            state__in=LEASED_STATES, cancel_requested_at__isnull=True, id__in=ids
        )
        return asked.update(cancel_requested_at=Now())

    def run_now(self, *, ids: Sequence[int]) -> int:
        """The run time of each waiting (scheduled|failed) job moved to now; how many."""
        return Job.objects.filter(state__in=DUE_STATES, id__in=ids).update(run_at=Now())
