"""What the job store reads and writes: one frozen dataclass per row shape, its fields
named as the statements name their columns."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def ms_whole(value: dt.datetime) -> int:
    return int(value.timestamp() * 1000)


def ms_exact(value: dt.datetime) -> float:
    return ((value - _EPOCH) // _MICROSECOND) / 1000  # whole microseconds, then ms


def from_ms(ms: float) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=ms)


def from_us(us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=us)


# --- transitions -----------------------------------------------------------------------


@dataclass(frozen=True)
class PollWindow:
    """Which pending jobs a poll reads: those due before now + `lookahead` s in the
    `owned` of `partitions` partitions, at most `limit`, after the keyset `after` =
    (run_at, id) of a previous page."""

    lookahead: float
    partitions: int
    owned: Sequence[int]
    limit: int
    after: tuple[dt.datetime, int] | None = None


@dataclass(frozen=True)
class DueJob:
    id: int
    run_at_ms: int
    run_at: dt.datetime  # exact, for the keyset of the next page
    priority: int = 5
    queue: str = "default"


@dataclass(frozen=True)
class Claim:
    id: int
    token: int
    run_at_ms: float  # exact, to the microsecond: when the job may start
    queue: str = "default"  # its Celery queue is named after it


# How far apart the rates of this machine's monotonic clock and the database's clock may
# be: the kernel slews each clock by at most 500 ppm (NTP's limit), so two machines' by at
# most twice that. A bound counts the database clock as running this much slower.
MAX_DRIFT = 0.001


@dataclass(frozen=True)
class DatabaseTime:
    """A lower bound of the database clock, from one round trip: the database read its
    clock (`read_ms`) before this process had the answer (`received`, time.monotonic()),
    so at any later moment t it shows at least read_ms + (t - received), less the drift
    the two clocks may have had since (MAX_DRIFT). Too early by at most the round trip
    and that drift; never too late, so a wait for it never ends early."""

    read_ms: float
    received: float
    sent: float  # time.monotonic() when the question left: the bound is this loose at most

    @property
    def round_trip_ms(self) -> float:
        return (self.received - self.sent) * 1000

    def tighter(self, other: DatabaseTime) -> DatabaseTime:
        """Of two valid lower bounds, the higher one (both grow at the same rate)."""
        return self if self._intercept() >= other._intercept() else other

    def at_least_ms(self, moment: float | None = None) -> float:
        moment = time.monotonic() if moment is None else moment
        return self.read_ms + (moment - self.received) * 1000 * (1 - MAX_DRIFT)

    def moment_of(self, db_ms: float) -> float:
        """The time.monotonic() by which the database clock has surely reached db_ms."""
        return self.received + (db_ms - self.read_ms) / 1000 / (1 - MAX_DRIFT)

    def slack_ms(self, moment: float) -> float:
        """How far below the database clock the bound may be at `moment`: the round trip,
        and the drift both ways since."""
        since = max(0.0, moment - self.received)
        return self.round_trip_ms * (1 + MAX_DRIFT) + since * 2000 * MAX_DRIFT

    def _intercept(self) -> float:
        return self.read_ms - self.received * 1000 * (1 - MAX_DRIFT)


@dataclass(frozen=True)
class StartedJob:
    id: int
    token: int
    handler: str
    payload: Any
    attempt: int
    max_attempts: int
    delivery: str
    retry_policy: dict
    idempotency_key: str
    run_at: dt.datetime
    time_limit: float | None
    clock: DatabaseTime
    cancel_requested: bool = False  # an operator cancelled it before it started
    # False: an at-least-once job whose start is deferred (it is still `claimed`): the
    # worker writes it if the job is still running tuning.DEFERRED_START_SECONDS later.
    start_written: bool = True
    queue: str = "default"

    def with_clock(self, clock: DatabaseTime) -> StartedJob:
        """This job with a tighter bound of the database clock. A copy of its fields, not
        `dataclasses.replace`, which would check and pass each of them again: a burst
        makes one copy per job."""
        copy = object.__new__(StartedJob)
        copy.__dict__.update(self.__dict__, clock=clock)
        return copy

    @property
    def begins_at(self) -> float:
        """The time.monotonic() at which the handler may begin: run_at, surely."""
        return self.clock.moment_of(ms_exact(self.run_at))


@dataclass(frozen=True)
class FailedAttempt:
    """A running job's attempt that failed: it moves to `state` (failed: due again in
    `retry_in` s; dead), with one error entry more."""

    job_id: int
    token: int
    state: str
    error: str
    kind: str
    retry_in: float | None
    began_ms: float | None  # when the handler began (database time), if it did
    traceback: str | None = None  # the handler's, for an exception it raised


@dataclass(frozen=True)
class Renewed:
    count: int
    cancel_requested: frozenset[int]  # of the renewed jobs, those an operator cancelled


@dataclass(frozen=True)
class Reaped:
    count: int
    next_expiry_ms: int | None  # when the next lease in the same partitions expires
    # The reaped jobs due again at once (claimed ones returned, retries), as
    # [id, run_at ms, priority, queue]: the reaper may claim them itself.
    due: list = field(default_factory=list)


# --- inserts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NewJob:
    """A job to insert; every other column starts at the store's defaults (scheduled, no
    attempts, no lease, no errors)."""

    handler: str
    run_at: dt.datetime
    payload: Any
    max_attempts: int
    retry_policy: dict
    delivery: str
    time_limit: float | None
    idempotency_key: str
    queue: str = "default"
    priority: int = 5
    concurrency_key: str = ""


@dataclass(frozen=True)
class InsertedJob:
    id: int
    idempotency_key: str
    created_at: dt.datetime


@dataclass(frozen=True)
class JobTemplate:
    """What every job of a member slice shares."""

    handler: str
    payload: dict
    max_attempts: int
    retry_policy: dict
    delivery: str
    time_limit: float | None
    queue: str = "default"
    priority: int = 5
    concurrency_key: str = ""  # "{member}" in it becomes each member's id


@dataclass(frozen=True)
class MemberSlice:
    """The planner's insert: one job per member of a slice, from `template`, with
    ``{"member_id": <id>}`` added to its payload and the key `key_prefix` + <id>. Members
    due before `not_before` are counted as missed instead; keys already taken are skipped.

    The members and their run times come from the planner, in two forms: `members_sql`
    (with `members_params`) selects ``id, run_at`` on PostgreSQL, where the store inserts
    from it in the same statement; `members` yields the same pairs through the ORM for the
    other databases. The query's parameters must not reuse the store's names (handler,
    payload, max_attempts, retry_policy, delivery, time_limit, key_prefix, not_before, queue,
    priority, concurrency_key)."""

    template: JobTemplate
    key_prefix: str
    not_before: dt.datetime
    members_sql: str
    members_params: Mapping[str, Any]
    members: Callable[[], Iterable[tuple[int, dt.datetime]]]


@dataclass(frozen=True)
class PlannedSlice:
    planned: int
    missed: int


# --- routing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueLimits:
    """A queue's limits as its locked row holds them, and the database clock then."""

    concurrency_limit: int | None
    key_concurrency_limit: int | None
    rate_limit: int | None
    rate_period: float
    rate_tat_ms: float | None
    now_ms: float


@dataclass(frozen=True)
class LimitedClaims:
    """A limited queue's claim: the claims won, and the ids asked for that are still due
    but were held back by a limit (the dispatcher keeps them)."""

    claims: list[Claim]
    held: list[int]
