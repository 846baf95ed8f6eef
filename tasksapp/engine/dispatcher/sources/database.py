"""The database as due source: poll ahead, hold the jobs in a timing wheel, hand them to
the claimer at their claim time.

A poll reads the served partitions' pending jobs due within the lookahead, in keyset
pages, into a hierarchical timing wheel. Until the next poll, NOTIFY announces the work
scheduled meanwhile: a job due before the polled horizon goes into the wheel at once.
Both carry each job's route (queue, priority), which the claimer claims them by
(dispatcher/claimer.py).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections import Counter

from tasksapp.engine.dispatcher.routing import Route, default_route
from tasksapp.engine.dispatcher.sources.base import DispatchClock
from tasksapp.engine.dispatcher.wheel import TimingWheel
from tasksapp.engine.settings import TempoSettings
from tasksapp.engine.transitions import DueJob, job_poll_due

MODE_DATABASE = "database"
# One poll reads at most this many due jobs (the next poll goes on after the last).
POLL_LIMIT = 50_000
# Jobs whose claim times fall in one round of this many ms are claimed together at its
# start: a steady stream is claimed, sent and started in rounds, not a job at a time.
# Each is claimed at most this much earlier than its lead asks; its worker waits for
# its instant (and packs it with the round's others into one message: messages.py).
CLAIM_ROUND_MS = 20


class DatabaseSource:
    initial_mode = MODE_DATABASE

    def __init__(self, *, settings: TempoSettings, clock: DispatchClock, poll_seconds: float):
        self.settings = settings
        self.clock = clock
        self.partitions = settings.partitions
        # Rare with notifications; without them (SQLite, or polling only) new work is
        # found by frequent polls.
        self.poll_seconds = poll_seconds
        self.counters: Counter[str] = Counter()
        self.wheel = _new_wheel()
        self.routes: dict[int, Route] = {}  # of every job in the wheel
        self.taken: list[tuple[int, Route]] = []  # due already when handed over (hold_due)
        self.rewind()

    def rewind(self) -> None:
        """Poll the served partitions anew, from the start, at once."""
        self.horizon_ms = -math.inf  # every pending owned job due before this is held
        self.cursor: tuple[dt.datetime, int] | None = None  # keyset of a paged poll
        self.next_poll = 0.0

    # -- ownership ----------------------------------------------------------------------
    def gained(self, partitions: list[int]) -> None:
        self.rewind()

    def released(self, partitions: list[int]) -> None:
        self.drop_held(set(partitions))

    def reconnected(self) -> None:
        self.rewind()

    def forget(self) -> None:
        self.wheel = _new_wheel()
        self.routes = {}
        self.taken = []

    def drop_held(self, partitions: set[int]) -> None:
        """Forget the timers of these partitions (released, or served by the index)."""
        count = self.partitions
        self.wheel.remove_where(lambda key: key % count in partitions)
        self.routes = {k: v for k, v in self.routes.items() if k % count not in partitions}
        self.taken = [(k, route) for k, route in self.taken if k % count not in partitions]

    # -- one turn -----------------------------------------------------------------------
    def due(self, owned: list[int]) -> list[tuple[int, Route]]:
        if self.clock.now_ms() >= self.next_poll:
            self._poll(owned)
        now = self.clock.now_ms()
        due, self.taken = self.taken, []
        for job_id in self.wheel.pop_due(int(now)):
            due.append((job_id, self.routes.pop(job_id, None) or default_route(now)))
        return due

    def _poll(self, owned: list[int]) -> None:
        if not owned:
            self.next_poll = self.clock.now_ms() + self.settings.poll_interval_seconds * 1000
            return
        limit = POLL_LIMIT
        now = self.clock.now_ms()
        rows = job_poll_due(
            lookahead=self.settings.lookahead_seconds,
            partitions=self.partitions,
            owned=owned,
            limit=limit,
            after=self.cursor,
        )
        self.counters.update(polls=1, statements=1, rows_fetched=len(rows))
        for row in rows:
            self.routes[row.id] = Route(row.queue, row.priority, row.run_at_ms)
            self.wheel.add(row.id, self._claim_at(row.run_at_ms, row.priority))
        self._plan_next_poll(rows, now=now, limit=limit)

    def _plan_next_poll(self, rows: list[DueJob], *, now: float, limit: int) -> None:
        if len(rows) >= limit:  # more to page through: continue right after the last row
            self.cursor = (rows[-1].run_at, rows[-1].id)
            self.horizon_ms = rows[-1].run_at_ms
            self.next_poll = now if len(self.wheel) < 4 * limit else now + 1000
            return
        self.cursor = None
        self.horizon_ms = now + self.settings.lookahead_seconds * 1000
        self.next_poll = now + self.poll_seconds * 1000

    def hold_due(self, jobs: list[tuple[int, Route]]) -> None:
        """Jobs taken ahead, learnt elsewhere (the Redis index, as far ahead as a critical
        job's lead): handed to the claimer from the next turn on once within their own
        lead, as the jobs of the wheel are; until then, in the wheel."""
        now = self.clock.now_ms()
        for job_id, route in jobs:
            self.wheel.remove(job_id)
            claim_at = self._claim_at(route.run_at_ms, route.priority)
            if claim_at > now:
                self.routes[job_id] = route
                self.wheel.add(job_id, claim_at)
            else:
                self.routes.pop(job_id, None)
                self.taken.append((job_id, route))

    def announced(self, job_id: int, run_at_ms: int | None, route: Route | None = None) -> bool:
        if run_at_ms is None:
            self.wheel.remove(job_id)
            self.routes.pop(job_id, None)
            return True
        if run_at_ms < self.horizon_ms:  # rescheduled: it waits for its new run time
            route = self.routes[job_id] = route or default_route(run_at_ms)
            self.wheel.add(job_id, self._claim_at(run_at_ms, route.priority))
            return True
        return False

    def _claim_at(self, run_at_ms: float, priority: int) -> int:
        """When to claim a job: its lead before its run time, at the start of that
        moment's claim round (CLAIM_ROUND_MS)."""
        at = int(run_at_ms - self.clock.lead_ms(priority))
        return at - at % CLAIM_ROUND_MS

    def next_deadline(self) -> float:
        deadline = self.next_poll
        wheel_next = self.wheel.next_expiration()
        if wheel_next is not None:
            deadline = min(deadline, wheel_next)
        return deadline


def _new_wheel() -> TimingWheel:
    return TimingWheel(start_ms=int(time.time() * 1000))
