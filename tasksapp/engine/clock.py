"""The database clock as a dispatcher sees it: an offset (ms) to add to `time.time()`.

Run times are compared with the database clock (`clock_timestamp()`), so dispatchers on
other machines must know how far their own clock is from it, to claim on time. (Workers
need no estimate: each start's answer bounds the database clock, see
`tasksapp.engine.transitions.DatabaseTime`.) A sample is one
round trip: the database's time against the midpoint of ours. A round trip delayed on one
leg (a busy machine, a slow network) skews the midpoint by up to half its length, so the
estimate keeps the sample with the shortest round trip; the kept sample ages a little at
every new one, so a clock drifting away is followed.
"""

from __future__ import annotations

import math
import threading
import time

AGING = 1.05  # the kept round trip counts this much longer at every new sample


class ClockOffset:
    def __init__(self) -> None:
        self.offset_ms = 0.0
        self._best_rtt = math.inf
        self._lock = threading.Lock()

    @property
    def measured(self) -> bool:
        return self._best_rtt < math.inf

    def reset(self) -> None:
        with self._lock:
            self.offset_ms, self._best_rtt = 0.0, math.inf

    def observe(self, before_ms: float, after_ms: float, db_ms: float) -> None:
        """One sample: our time before and after a query that read the database's."""
        rtt = after_ms - before_ms
        with self._lock:
            self._best_rtt *= AGING
            if rtt <= self._best_rtt:
                self._best_rtt = rtt
                self.offset_ms = db_ms - (before_ms + after_ms) / 2

    @property
    def round_trip_ms(self) -> float:
        """The shortest recent round trip to the database (0 before the first sample)."""
        return self._best_rtt if self.measured else 0.0

    def now_ms(self) -> float:
        """The database's time now, as estimated here."""
        return time.time() * 1000 + self.offset_ms
