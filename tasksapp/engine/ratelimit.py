"""The rate limit's arithmetic: GCRA (the generic cell rate algorithm), a token bucket
kept as one timestamp per queue. Pure: the claim (tasksapp.engine.transitions) reads and
writes the timestamp in the queue's row, under its lock.

The bucket holds a quarter of a period's starts. That is the burst after an idle spell,
and also how late a dispatcher may look again without losing starts: the rate is held on
average as long as the claims of the queue are never more than a quarter period apart
while jobs wait (a tenth, as before, lost a start for every interval a turn came later
than 0.1 period: 9 % under at 200/s on a loaded machine).
"""

from __future__ import annotations

import math

BURST_SHARE = 4  # the bucket holds a quarter of a period's starts (at least one)
# While the rate holds jobs back, the dispatcher looks again once this share of the bucket
# has accrued: a claim of some starts every 1/20 period, not one claim per start.
BATCH_SHARE = 5


def gcra_burst(limit: int) -> int:
    """The most starts let through at once: a quarter of the limit, at least one."""
    return max(1, limit // BURST_SHARE)


def gcra_batch(limit: int) -> int:
    """How many starts accrue before the dispatcher looks again at jobs held back."""
    return max(1, gcra_burst(limit) // BATCH_SHARE)


def gcra_allowance(
    *, tat_ms: float | None, now_ms: float, limit: int, period_ms: float, wanted: int
) -> tuple[int, float]:
    """How many of `wanted` starts a rate of `limit` per `period_ms` allows now, and the
    new theoretical arrival time, TAT (ms). Each start moves the TAT on by one interval
    (period / limit); a start conforms while the TAT is less than a burst of intervals
    ahead of now. So starts are spread evenly, after an idle spell a burst goes at once,
    and any window of one period holds at most limit + burst - 1 starts."""
    interval = period_ms / limit
    tat = now_ms if tat_ms is None else max(tat_ms, now_ms)
    room = math.floor((now_ms + gcra_burst(limit) * interval - tat) / interval + 1e-6)
    allowed = max(0, min(wanted, room))
    return allowed, tat + allowed * interval


def gcra_next_start_ms(*, tat_ms: float, limit: int, period_ms: float, starts: int = 1) -> float:
    """When `starts` more starts conform (database time, ms)."""
    interval = period_ms / limit
    return tat_ms - (gcra_burst(limit) - starts) * interval
