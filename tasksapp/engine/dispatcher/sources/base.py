"""What the dispatcher loop asks of a due source, and what a source may use of the loop."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tasksapp.engine.settings import TempoSettings

BACKPRESSURE_RETRY_MS = 10  # held back by a full queue: look at it again this soon


@dataclass(frozen=True)
class DispatchContext:
    """The dispatcher's side, as its due source sees it."""

    name: str  # the dispatcher's: owner of its claims and takes, in its log lines
    settings: TempoSettings
    counters: Counter[str]  # polls, rows fetched, statements: written by `flush_counters`
    flush_counters: Callable[[], None]
    now_ms: Callable[[], float]  # the database clock, as estimated by the coordinator
    # How long before run_at to claim: the configured lead plus round trips to the database.
    lead_ms: Callable[[], int]
    owned: Callable[[], list[int]]  # the partitions the dispatcher owns now, sorted
    # How many of this many due jobs may be claimed now (backpressure: the queue's room).
    room_for: Callable[[int], int]
    # Claim these ids (fenced: only rows still due are won) and publish the claims.
    claim_and_publish: Callable[[list[int]], None]


class DueSource(Protocol):
    """Where the dispatcher learns which jobs of its partitions are due.

    Once per turn the loop calls `step()`, in which the source hands the owned jobs due
    by now to `claim_and_publish`, as far as `room_for` allows. The loop tells it which
    partitions it gained or released, forwards the NOTIFY announcements of owned jobs,
    and waits no longer than `next_deadline()`.
    """

    # The dispatch mode shown on the dispatcher's row until the source records another.
    initial_mode: str

    def gained(self, partitions: list[int]) -> None:
        """The dispatcher owns these partitions now: find their due jobs."""

    def released(self, partitions: list[int]) -> None:
        """A peer owns these partitions now: forget what is held of them."""

    def reconnected(self) -> None:
        """The coordination session was opened again: read the owned partitions anew."""

    def forget(self) -> None:
        """Drop everything held (database trouble, stop): it is all in the database."""

    def step(self) -> None:
        """One turn: learn what is due and claim and publish what is due by now."""

    def announced(self, job_id: int, run_at_ms: int | None) -> None:
        """NOTIFY: an owned job is due at `run_at_ms` (inserted, rescheduled, retried,
        reaped), or no longer (None: cancelled)."""

    def next_deadline(self) -> float:
        """When (database clock, ms) the source next has work: the loop waits until then
        at the latest."""
