"""The database as due source: poll ahead, hold due jobs in a timing wheel, claim them at
run time.

A poll reads the served partitions' pending jobs due within the lookahead, in keyset
pages, into a hierarchical timing wheel. Until the next poll, NOTIFY announces the work
scheduled meanwhile: a job due before the polled horizon goes into the wheel at once.
Both carry each job's route (queue, priority): jobs due are claimed per queue, highest
priority first, unless their queue is paused or they are below the critical priority in
degraded mode (dispatcher/routing.py). The due jobs of a limited queue are handed to the
limited claimer, which claims them on a thread of its own (dispatcher/limited.py).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable

from tasksapp.engine.dispatcher.routing import ReadyJobs, Route, default_route
from tasksapp.engine.dispatcher.sources.base import BACKPRESSURE_RETRY_MS, DispatchContext
from tasksapp.engine.dispatcher.wheel import TimingWheel
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

    def __init__(
        self,
        context: DispatchContext,
        *,
        poll_seconds: float,
        polled: Callable[[], list[int]] | None = None,
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.partitions = context.settings.partitions
        # Rare with notifications; without them (SQLite, or polling only) new work is
        # found by frequent polls.
        self.poll_seconds = poll_seconds
        self.polled = polled or context.owned  # the owned partitions served from here
        self.wheel = _new_wheel()
        self.routes: dict[int, Route] = {}  # of every job held (in the wheel or ready)
        # Due, not yet claimed: held back by backpressure, a limit or a paused queue.
        self.ready = ReadyJobs(aging_ms=context.settings.priority_aging_seconds * 1000)
        self.retry_at: float | None = None  # when jobs held back are looked at again
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
        self.ready = ReadyJobs(aging_ms=self.settings.priority_aging_seconds * 1000)
        self.context.limited.clear()

    def drop_held(self, partitions: set[int]) -> None:
        """Forget the timers of these partitions (released, or served by the index)."""
        count = self.partitions
        self.wheel.remove_where(lambda key: key % count in partitions)
        self.ready.remove_where(lambda key: key % count in partitions)
        self.context.limited.remove_where(lambda key: key % count in partitions)
        self.routes = {k: v for k, v in self.routes.items() if k % count not in partitions}

    # -- one turn -----------------------------------------------------------------------
    def step(self) -> None:
        if self.context.now_ms() >= self.next_poll:
            self._poll()
        self._dispatch_due()

    def _poll(self) -> None:
        owned = self.polled()
        if not owned:
            self.next_poll = self.context.now_ms() + self.settings.poll_interval_seconds * 1000
            return
        limit = POLL_LIMIT
        now = self.context.now_ms()
        rows = job_poll_due(
            lookahead=self.settings.lookahead_seconds,
            partitions=self.partitions,
            owned=owned,
            limit=limit,
            after=self.cursor,
        )
        self.context.counters.update(polls=1, statements=1, rows_fetched=len(rows))
        self.context.flush_counters()  # scored events are written at once: a SIGKILL loses none
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

    def _dispatch_due(self) -> None:
        now = self.context.now_ms()
        for job_id in self.wheel.pop_due(int(now)):
            route = self.routes.get(job_id) or self.routes.setdefault(job_id, default_route(now))
            self.ready.add(job_id, route)
        self.retry_at = None
        if not self.ready:
            return
        rules, min_priority = self.context.rules(), self.context.min_priority()
        for queue in self.ready.queues():
            if rules.limited(queue):
                self._hand_over(queue)
            elif not rules.paused(queue):
                self._dispatch_queue(queue, min_priority=min_priority)

    def _hand_over(self, queue: str) -> None:
        """A limited queue's due jobs go to the limited claimer (its own thread)."""
        jobs = self.ready.pop_queue(queue)
        for job_id, _ in jobs:
            self.routes.pop(job_id, None)
        self.context.limited.offer(jobs)

    def _dispatch_queue(self, queue: str, *, min_priority: int) -> None:
        """Claim what the queue has room for, best first; plan when to look again at what
        is left (a paused queue, or jobs below the critical priority, wait for a NOTIFY
        that the routing changed)."""
        waiting = self.ready.count(queue, min_priority=min_priority)
        if not waiting:
            return
        room = self.context.room_for(waiting, queue)
        if room > 0:
            now = self.context.now_ms()
            due = self.ready.first(queue, room, now_ms=now, min_priority=min_priority)
            self.context.claim_and_publish(due, None)
            for job_id in due:
                self.ready.remove(job_id)
                self.routes.pop(job_id, None)
            if room >= waiting:
                return
        self._retry_at(self.context.now_ms() + BACKPRESSURE_RETRY_MS)

    def _retry_at(self, at_ms: float) -> None:
        self.retry_at = at_ms if self.retry_at is None else min(self.retry_at, at_ms)

    def hold_due(self, jobs: list[tuple[int, Route]]) -> None:
        """Jobs taken ahead, learnt elsewhere (the Redis index, as far ahead as a critical
        job's lead): claimed from the next turn's dispatch on once within their own lead,
        as the jobs of the wheel are; until then, in the wheel."""
        now = self.context.now_ms()
        for job_id, route in jobs:
            self.wheel.remove(job_id)
            self.routes[job_id] = route
            claim_at = self._claim_at(route.run_at_ms, route.priority)
            if claim_at > now:
                self.wheel.add(job_id, claim_at)
            else:
                self.ready.add(job_id, route)

    def announced(self, job_id: int, run_at_ms: int | None, route: Route | None = None) -> None:
        if run_at_ms is None:
            self.wheel.remove(job_id)
            self.ready.remove(job_id)
            self.context.limited.remove(job_id)
            self.routes.pop(job_id, None)
        elif run_at_ms < self.horizon_ms:
            route = self.routes[job_id] = route or default_route(run_at_ms)
            self.ready.remove(job_id)  # rescheduled: it waits for its new run time
            self.context.limited.remove(job_id)
            self.wheel.add(job_id, self._claim_at(run_at_ms, route.priority))

    def _claim_at(self, run_at_ms: float, priority: int) -> int:
        """When to claim a job: its lead before its run time, at the start of that
        moment's claim round (CLAIM_ROUND_MS)."""
        at = int(run_at_ms - self.context.lead_ms(priority))
        return at - at % CLAIM_ROUND_MS

    def waiting(self) -> int:
        return len(self.ready) + self.context.limited.waiting()

    def next_deadline(self) -> float:
        deadline = self.next_poll
        wheel_next = self.wheel.next_expiration()
        if wheel_next is not None:
            deadline = min(deadline, wheel_next)
        if self.retry_at is not None:  # held back: look at them again then
            deadline = min(deadline, self.retry_at)
        return deadline


def _new_wheel() -> TimingWheel:
    return TimingWheel(start_ms=int(time.time() * 1000))
