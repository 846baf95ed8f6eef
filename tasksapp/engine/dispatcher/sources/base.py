"""What the dispatcher loop asks of a due source, and what a source may read of the loop."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured

from tasksapp.engine.dispatcher.routing import Route

BACKPRESSURE_RETRY_MS = 10  # held back by a full queue: look at it again this soon
MODE_UNREACHABLE = "redis-unreachable"  # the Redis source's mode: every shard polled


@dataclass(frozen=True)
class ClaimOutcome:
    """What a claim left: the ids still due but held back by their queue's limits (the
    claimer keeps them), and when to try them again (database ms)."""

    held: list[int] = field(default_factory=list)
    retry_at_ms: float | None = None


class DispatchClock(Protocol):
    """The dispatcher's clock, as its due source reads it."""

    def now_ms(self) -> float:
        """The database clock, as estimated by the coordinator."""

    def lead_ms(self, priority: int | None = None) -> int:
        """How long before run_at to claim: the configured lead plus round trips to the
        database (critical jobs further ahead)."""


class DueSource(Protocol):
    """Where the dispatcher learns which jobs of its partitions are due.

    Once per turn the loop asks `due()` for the owned jobs whose claim time has come and
    hands them to its claimer (dispatcher/claimer.py): the source holds them no longer.
    The loop tells it which partitions it gained or released, forwards the NOTIFY
    announcements of owned jobs, and waits no longer than `next_deadline()`. A source
    counts its reads in its own `counters`, which the loop takes.
    """

    # The dispatch mode shown on the dispatcher's row until the source records another.
    initial_mode: str
    counters: Counter[str]  # polls, rows fetched, statements

    def gained(self, partitions: list[int]) -> None:
        """The dispatcher owns these partitions now: find their due jobs."""

    def released(self, partitions: list[int]) -> None:
        """A peer owns these partitions now: forget what is held of them."""

    def reconnected(self) -> None:
        """The coordination session was opened again: read the owned partitions anew."""

    def forget(self) -> None:
        """Drop everything held (database trouble, stop): it is all in the database."""

    def due(self, owned: list[int]) -> list[tuple[int, Route]]:
        """The jobs of the `owned` partitions (sorted: those served now) whose claim time
        has come, with their routes, learnt by polls, announcements or an index."""

    def announced(self, job_id: int, run_at_ms: int | None, route: Route | None = None) -> bool:
        """NOTIFY: an owned job is due at `run_at_ms` (inserted, rescheduled, retried,
        reaped), with its queue and priority, or no longer (None: cancelled). True if a
        due time the claimer may still hold for it stands no more (withdraw it there)."""

    def next_deadline(self) -> float:
        """When (database clock, ms) the source next has work: the loop waits until then
        at the latest."""


# A due source's constructor: (name=, settings=, clock=) — the dispatcher's name (owner
# of its takes, in log lines), its TempoSettings and its DispatchClock.
SourceFactory = Callable[..., DueSource]
# Due sources besides the database's, by the dispatch mode that selects them: registered
# by the optional apps that provide them (tasksapp.contrib.redis_index), never imported
# by the engine.
DUE_SOURCES: dict[str, SourceFactory] = {}
PROVIDERS = {"redis": "tasksapp.contrib.redis_index"}  # the app to install for a mode
ERR_NO_SOURCE = (
    'TEMPO["DISPATCH_MODE"] = {mode!r} needs {app!r} in INSTALLED_APPS (it provides that '
    "due source)"
)


def register_due_source(mode: str, factory: SourceFactory) -> None:
    DUE_SOURCES[mode] = factory


def due_source_factory(mode: str) -> SourceFactory:
    """The registered source of a dispatch mode, or an error naming the app to install."""
    if mode not in DUE_SOURCES:
        raise ImproperlyConfigured(ERR_NO_SOURCE.format(mode=mode, app=PROVIDERS.get(mode, "?")))
    return DUE_SOURCES[mode]
