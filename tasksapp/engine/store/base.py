"""What every job store does: the engine's bulk reads and writes of jobs.

Every write that changes `state` is guarded on the expected state and, after a claim, on
the fencing token (`lease_token`): a process that lost its lease changes nothing. The
callers (tasksapp.engine.transitions) never pass empty batches.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Protocol, overload

from .rows import (
    Claim,
    DatabaseTime,
    DueJob,
    InsertedJob,
    MemberSlice,
    NewJob,
    PlannedSlice,
    Reaped,
    StartedJob,
)

LEASE_EXPIRED_KIND = "lease_expired"  # the error entry of a running job whose lease expired


class JobStore(Protocol):
    def poll_due(
        self,
        *,
        lookahead: float,
        partitions: int,
        owned: Sequence[int],
        limit: int,
        after: tuple[dt.datetime, int] | None,
    ) -> list[DueJob]:
        """Scheduled or failed jobs due before now + lookahead in the owned partitions,
        ordered by (run_at, id), after the keyset `after`."""
        ...

    def claim_due(self, *, ids: Sequence[int], owner: str, ttl: float, lead: float) -> list[Claim]:
        """scheduled|failed → claimed for the ids due within `lead` s; the claims won."""
        ...

    def reap_expired(self, *, partitions: int, owned: Sequence[int], error: str) -> Reaped:
        """Expired leases in the owned partitions: claimed → scheduled; running → lost,
        dead or failed (with `error`) per delivery mode and attempts."""
        ...

    def start(
        self, *, claims: Sequence[tuple[int, int]], worker: str, ttl: float, lead: float
    ) -> list[StartedJob]:
        """claimed → running for each (id, token) due within `lead` s."""
        ...

    def succeed(self, *, outcomes: Sequence[tuple[int, int, Any, float | None]]) -> set[int]:
        """running → succeeded for each (id, token, result, began_ms); the ids finished."""
        ...

    def fail(
        self,
        *,
        job_id: int,
        token: int,
        state: str,
        error: str,
        kind: str,
        retry_in: float | None,
        began_ms: float | None,
    ) -> bool:
        """running → `state` (failed: due again in `retry_in` s; dead), one error entry
        more."""
        ...

    def renew(self, *, leases: Sequence[tuple[int, int]], ttl: float) -> int:
        """Extend the leases of running jobs still held by (id, token)."""
        ...

    def database_time(self) -> DatabaseTime:
        """One round trip's lower bound of the database clock."""
        ...

    @overload
    def insert_jobs(self, source: Sequence[NewJob]) -> list[InsertedJob]: ...

    @overload
    def insert_jobs(self, source: MemberSlice) -> PlannedSlice: ...

    def insert_jobs(
        self, source: Sequence[NewJob] | MemberSlice
    ) -> list[InsertedJob] | PlannedSlice:
        """Insert new jobs, skipping idempotency keys already taken: the given rows (the
        ones inserted come back), or a member slice (how many were planned and missed)."""
        ...
