"""What the dispatcher loop asks of a due source, and what a source may use of the loop."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured

from tasksapp.engine.dispatcher.routing import Route, RoutingRules
from tasksapp.engine.settings import TempoSettings

BACKPRESSURE_RETRY_MS = 10  # held back by a full queue: look at it again this soon
MODE_UNREACHABLE = "redis-unreachable"  # the Redis source's mode: every shard polled


@dataclass(frozen=True)
class ClaimOutcome:
    """What a claim left: the ids still due but held back by their queue's limits (the
    source keeps them), and when to try them again (database ms)."""

    held: list[int] = field(default_factory=list)
    retry_at_ms: float | None = None


class LimitedJobs(Protocol):
    """What a source hands the due jobs of limited queues to (dispatcher/limited.py)."""

    def offer(self, jobs: list[tuple[int, Route]]) -> None: ...
    def remove(self, job_id: int) -> None: ...
    def remove_where(self, drop: Callable[[int], bool]) -> None: ...
    def clear(self) -> None: ...
    def waiting(self) -> int: ...


@dataclass(frozen=True)
class DispatchContext:
    """The dispatcher's side, as its due source sees it."""

    name: str  # the dispatcher's: owner of its claims and takes, in its log lines
    settings: TempoSettings
    counters: Counter[str]  # polls, rows fetched, statements: written by `flush_counters`
    flush_counters: Callable[[], None]
    now_ms: Callable[[], float]  # the database clock, as estimated by the coordinator
    # How long before run_at to claim: the configured lead plus round trips to the database.
    lead_ms: Callable[..., int]  # (priority=None): critical jobs are claimed further ahead
    # The partitions the dispatcher serves now, sorted: owned, and those it hands over.
    owned: Callable[[], list[int]]
    # How many of this many due jobs of a queue may be claimed now (backpressure: the room
    # in its Celery queue).
    room_for: Callable[[int, str], int]
    # Claim these ids (fenced: only rows still due are won) and publish the claims; ids of
    # one queue, given with its name, are claimed within its limits.
    claim_and_publish: Callable[[list[int], str | None], ClaimOutcome]
    # The queues' settings and the routing mode, and the lowest priority claimed now.
    rules: Callable[[], RoutingRules]
    min_priority: Callable[[], int]
    # Claims the due jobs of limited queues handed to it, on a thread of its own.
    limited: LimitedJobs


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

    def announced(self, job_id: int, run_at_ms: int | None, route: Route | None = None) -> None:
        """NOTIFY: an owned job is due at `run_at_ms` (inserted, rescheduled, retried,
        reaped), with its queue and priority, or no longer (None: cancelled)."""

    def waiting(self) -> int:
        """How many due jobs are held unclaimed now (backpressure, limits, pauses)."""

    def next_deadline(self) -> float:
        """When (database clock, ms) the source next has work: the loop waits until then
        at the latest."""


# Due sources besides the database's, by the dispatch mode that selects them: registered
# by the optional apps that provide them (tasksapp.contrib.redis_index), never imported
# by the engine.
DUE_SOURCES: dict[str, Callable[[DispatchContext], DueSource]] = {}
PROVIDERS = {"redis": "tasksapp.contrib.redis_index"}  # the app to install for a mode
ERR_NO_SOURCE = (
    'TEMPO["DISPATCH_MODE"] = {mode!r} needs {app!r} in INSTALLED_APPS (it provides that '
    "due source)"
)


def register_due_source(mode: str, factory: Callable[[DispatchContext], DueSource]) -> None:
    DUE_SOURCES[mode] = factory


def due_source_factory(mode: str) -> Callable[[DispatchContext], DueSource]:
    """The registered source of a dispatch mode, or an error naming the app to install."""
    if mode not in DUE_SOURCES:
        raise ImproperlyConfigured(ERR_NO_SOURCE.format(mode=mode, app=PROVIDERS.get(mode, "?")))
    return DUE_SOURCES[mode]
