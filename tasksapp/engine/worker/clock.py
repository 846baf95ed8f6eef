"""The database clock as a worker process knows it, for handlers to begin on time.

A handler begins when a lower bound of the database clock reaches its run time
(`DatabaseTime`), so a bound loose by some ms makes it late by as many. A start's own
answer bounds the clock, but loosely when it was slow: on a busy machine the answer waits
for a CPU. So the process remembers the tightest bound it has seen lately, from any
thread's start or reading, and a batch takes the tighter of its start's and that one. Only
when both are loose does it read the clock again, at once, during the lead the dispatcher
gave it (a reading at run time would make the job late by its own round trip).
"""

from __future__ import annotations

import threading
import time

from tasksapp.engine.store.rows import DatabaseTime, StartedJob, ms_exact
from tasksapp.engine.transitions import database_time

TIGHT_MS = 1.0  # a bound at most this loose at run time needs no other reading
READ_BEFORE_S = 0.005  # no reading starts later than this before the first run time
MAX_READINGS = 3  # per batch: on a saturated machine every answer may come slowly
# A bound is remembered this long at most: its drift margin has grown past TIGHT_MS by
# then, and a database that failed over to another machine's clock is not judged by the
# old one's for longer than this.
REMEMBERED_S = 1.0


class ClockMemory:
    """The tightest recent bound of the database clock this process has seen."""

    def __init__(self) -> None:
        self._best: DatabaseTime | None = None
        self._lock = threading.Lock()

    def tightest(self, bound: DatabaseTime) -> DatabaseTime:
        """The tighter of `bound` and the one remembered, which is remembered from now."""
        with self._lock:
            best = self._best
            if best is None or time.monotonic() - best.received > REMEMBERED_S:
                best = bound
            self._best = best = best.tighter(bound)
            return best

    def forget(self) -> None:
        with self._lock:
            self._best = None


memory = ClockMemory()


def tightened(started: list[StartedJob]) -> list[StartedJob]:
    """The started jobs with the tightest bound of the database clock this process can
    have by their run time, so that each handler begins just after its run_at."""
    if not started:
        return started
    clock = memory.tightest(started[0].clock)
    first_ms = min(ms_exact(job.run_at) for job in started)
    for _ in range(MAX_READINGS):
        first = clock.moment_of(first_ms)
        if clock.slack_ms(first) <= TIGHT_MS or first - time.monotonic() < READ_BEFORE_S:
            break
        clock = memory.tightest(database_time())
    if all(job.clock is clock for job in started):  # the start's answer was the tightest
        return started
    return [job.with_clock(clock) for job in started]
