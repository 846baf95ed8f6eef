"""The dispatcher's clock: the database time, as the coordination session estimates it,
and how long before a job's run time to claim it."""

from __future__ import annotations

import time

from tasksapp.engine.cluster.base import Coordinator
from tasksapp.engine.options import MAX_PRIORITY
from tasksapp.engine.settings import TempoSettings

# The claim lead covers this many measured round trips to the database besides
# TEMPO_DISPATCH_LEAD_MS: a claim, its message and the start take several.
LEAD_ROUND_TRIPS = 12.0


class LoopClock:
    """The DispatchClock of one dispatcher (sources/base.py). Until its coordinator is
    connected it reads the local clock."""

    def __init__(self, settings: TempoSettings) -> None:
        self.settings = settings
        self.coordinator: Coordinator | None = None
        self.critical_priority = MAX_PRIORITY  # the routing rules', set when they are read

    def now_ms(self) -> float:
        return self.coordinator.clock.now_ms() if self.coordinator else time.time() * 1000

    def lead_ms(self, priority: int | None = None) -> int:
        """Claim this much before run_at, so the message is at a worker and the job started
        when the time comes (the handler waits for run_at; the start is guarded by the
        database clock): the configured lead, plus the round trips a claim, its message
        and the start take, counted from the measured round trip to the database. On a
        local network that adds a millisecond or two; 25 ms away, some 300 ms. A job of
        `priority` at or above the critical one: TEMPO_CRITICAL_LEAD_MS, if longer."""
        round_trip = self.coordinator.clock.round_trip_ms if self.coordinator else 0.0
        extra = LEAD_ROUND_TRIPS * round_trip
        lead = self.settings.dispatch_lead_ms
        if priority is not None and priority >= self.critical_priority:
            lead = max(lead, self.settings.critical_lead_ms)  # critical: ready well ahead
        return lead + round(extra)  # the wheel counts whole ms
