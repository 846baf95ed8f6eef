"""The rate limit's arithmetic: GCRA (the generic cell rate algorithm), a token bucket
kept as one timestamp per queue. Pure: the claim (tasksapp.engine.transitions) reads and
writes the timestamp in the queue's row, under its lock."""

from __future__ import annotations

import math

BURST_SHARE = 10  # a burst may hold a tenth of a period's starts (at least one)


def _burst(limit: int) -> int:
    return max(1, limit // BURST_SHARE)


def gcra_allowance(
    *, tat_ms: float | None, now_ms: float, limit: int, period_ms: float, wanted: int
) -> tuple[int, float]:
    """How many of `wanted` starts a rate of `limit` per `period_ms` allows now, and the
    new theoretical arrival time, TAT (ms). Each start moves the TAT on by one interval
    (period / limit); a start conforms while the TAT is less than a burst of intervals
    ahead of now. So starts are spread evenly, after an idle spell a burst of up to a
    tenth of the limit goes at once, and any window of one period holds at most
    limit + burst - 1 starts."""
    interval = period_ms / limit
    tat = now_ms if tat_ms is None else max(tat_ms, now_ms)
    room = math.floor((now_ms + _burst(limit) * interval - tat) / interval + 1e-9)
    allowed = max(0, min(wanted, room))
    return allowed, tat + allowed * interval


def gcra_next_start_ms(*, tat_ms: float, limit: int, period_ms: float) -> float:
    """When the next start conforms (database time, ms)."""
    interval = period_ms / limit
    return tat_ms - (_burst(limit) - 1) * interval
