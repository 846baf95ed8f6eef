"""The database as due source: poll ahead, hold due jobs in a timing wheel, claim them at
run time.

A poll reads the served partitions' pending jobs due within the lookahead, in keyset
pages, into a hierarchical timing wheel. Until the next poll, NOTIFY announces the work
scheduled meanwhile: a job due before the polled horizon goes into the wheel at once.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable

from tasksapp.engine.dispatcher.sources.base import BACKPRESSURE_RETRY_MS, DispatchContext
from tasksapp.engine.dispatcher.wheel import TimingWheel
from tasksapp.engine.transitions import DueJob, job_poll_due

MODE_DATABASE = "database"


class DatabaseSource:
    initial_mode = MODE_DATABASE

    def __init__(
        self,
        context: DispatchContext,
        *,
        listen_notify: bool,
        polled: Callable[[], list[int]] | None = None,
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.partitions = context.settings.partitions
        # Without notifications (SQLite) new work is found by a short poll instead.
        self.listen_notify = listen_notify
        self.polled = polled or context.owned  # the owned partitions served from here
        self.wheel = _new_wheel()
        self.ready: dict[int, int] = {}  # due, not yet claimed (held back by backpressure)
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
        self.ready = {}

    def drop_held(self, partitions: set[int]) -> None:
        """Forget the timers of these partitions (released, or served by the index)."""
        count = self.partitions
        self.wheel.remove_where(lambda key: key % count in partitions)
        self.ready = {k: v for k, v in self.ready.items() if k % count not in partitions}

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
        limit = self.settings.poll_limit
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
            self.wheel.add(row.id, row.run_at_ms - self.context.lead_ms())
        self._plan_next_poll(rows, now=now, limit=limit)

    def _plan_next_poll(self, rows: list[DueJob], *, now: float, limit: int) -> None:
        if len(rows) >= limit:  # more to page through: continue right after the last row
            self.cursor = (rows[-1].run_at, rows[-1].id)
            self.horizon_ms = rows[-1].run_at_ms
            self.next_poll = now if len(self.wheel) < 4 * limit else now + 1000
            return
        self.cursor = None
        self.horizon_ms = now + self.settings.lookahead_seconds * 1000
        if self.listen_notify:
            interval = self.settings.poll_interval_seconds
        else:
            interval = self.settings.fallback_poll_seconds
        self.next_poll = now + interval * 1000

    def _dispatch_due(self) -> None:
        for job_id in self.wheel.pop_due(int(self.context.now_ms())):
            self.ready[job_id] = 1
        if not self.ready:
            return
        room = self.context.room_for(len(self.ready))
        if room <= 0:
            return
        due = list(self.ready)[:room]
        for job_id in due:
            del self.ready[job_id]
        self.context.claim_and_publish(due)

    def announced(self, job_id: int, run_at_ms: int | None) -> None:
        if run_at_ms is None:
            self.wheel.remove(job_id)
            self.ready.pop(job_id, None)
        elif run_at_ms < self.horizon_ms:
            self.wheel.add(job_id, run_at_ms - self.context.lead_ms())

    def next_deadline(self) -> float:
        deadline = self.next_poll
        wheel_next = self.wheel.next_expiration()
        if wheel_next is not None:
            deadline = min(deadline, wheel_next)
        if self.ready:  # held back: look at the queue again shortly
            deadline = min(deadline, self.context.now_ms() + BACKPRESSURE_RETRY_MS)
        return deadline


def _new_wheel() -> TimingWheel:
    return TimingWheel(start_ms=int(time.time() * 1000))
