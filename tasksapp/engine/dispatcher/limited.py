"""Limited queues are claimed off the loop that claims timed work.

A limited queue's claim is a transaction of two or three statements, repeated every
20-50 ms while the queue's limits hold jobs back. Made by the dispatcher's loop, a flood
held by a limit delayed every other claim behind it: on two loaded cores, critical jobs
were claimed 100-200 ms late. The loop hands a limited queue's due jobs to this claimer
instead: a thread of its own, on a database connection of its own (Django's connections
are per thread), that claims them highest priority first and looks again when a slot or
a start may have come free. The loop's claims of timed work never wait for it.

The claimer holds ids and routes only: everything it holds is still `scheduled` in the
database, so dropping it (a released partition, a stop, database trouble) loses nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from django.db import DatabaseError, InterfaceError, close_old_connections

from tasksapp.engine.db import tempo_connection
from tasksapp.engine.dispatcher.routing import ReadyJobs, Route, RoutingRules
from tasksapp.engine.dispatcher.sources.base import ClaimOutcome

log = logging.getLogger(__name__)

# While a limit holds jobs back the claimer looks again this soon (a slot frees when a job
# ends); later if it claimed none (the queue is full, or another dispatcher claims it).
LIMITED_RETRY_MS = 20
LIMITED_FULL_RETRY_MS = 50
IDLE_WAIT_SECONDS = 0.5  # nothing held: sleep until jobs are handed over (or stop)
ERROR_PAUSE_SECONDS = 0.5


class LimitedClaimer:
    """Due jobs of limited queues, claimed by a thread of their own (see the module)."""

    def __init__(
        self,
        *,
        claim: Callable[[list[int], str], ClaimOutcome],
        rules: Callable[[], RoutingRules],
        min_priority: Callable[[], int],
        now_ms: Callable[[], float],
        aging_ms: float,
        name: str = "limited-claimer",
    ) -> None:
        self.claim = claim  # claim these ids of this queue within its limits, publish them
        self.rules = rules
        self.min_priority = min_priority
        self.now_ms = now_ms
        self.aging_ms = aging_ms
        self.name = name
        self.lock = threading.Lock()
        self.ready = ReadyJobs(aging_ms=aging_ms)
        self.retry_at: float | None = None  # when jobs held back are looked at again
        self._nudged = False
        self.counters: Counter[str] = Counter()
        self._claimed = 0  # claims made since the loop last asked (take_claimed)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the loop's side ----------------------------------------------------------------
    def offer(self, jobs: list[tuple[int, Route]]) -> None:
        """Due jobs of limited queues: claim them as their limits allow. Jobs it holds
        already are not news: their next look stays planned (a rate limit's next start)."""
        with self.lock:
            news = [self.ready.add(job_id, route) for job_id, route in jobs]
        self._ensure_started()
        if any(news):
            self.nudge()

    def nudge(self) -> None:
        """Look at the jobs held at once (new jobs, changed rules)."""
        with self.lock:
            self.retry_at = None
            self._nudged = True  # also if it comes while the thread claims
        self._wake.set()

    def remove(self, job_id: int) -> None:
        with self.lock:
            self.ready.remove(job_id)

    def remove_where(self, drop: Callable[[int], bool]) -> None:
        with self.lock:
            self.ready.remove_where(drop)

    def clear(self) -> None:
        with self.lock:
            self.ready = ReadyJobs(aging_ms=self.aging_ms)
            self.retry_at = None

    def waiting(self) -> int:
        with self.lock:
            return len(self.ready)

    def holds(self, job_id: int) -> bool:
        with self.lock:
            return job_id in self.ready

    def count_claims(self, *, claims: int, lost: int) -> None:
        """A claim of this thread: its statement, the claims won and those lost."""
        with self.lock:
            self.counters.update(statements=1, claims=claims, claims_lost=lost)
            self._claimed += claims

    def take_claimed(self) -> int:
        """How many claims were made since the last call (the reaper looks when their
        leases end)."""
        with self.lock:
            claimed, self._claimed = self._claimed, 0
        return claimed

    def take_counters(self) -> Counter[str]:
        with self.lock:
            counts, self.counters = self.counters, Counter()
        return counts

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _ensure_started(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    # -- the thread -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._wake.wait(self._timeout())
                self._wake.clear()
                if self._stopping.is_set():
                    break
                self._step_safely()
        finally:
            tempo_connection().close()  # this thread's own connection

    def _timeout(self) -> float:
        with self.lock:
            if not self.ready:
                return IDLE_WAIT_SECONDS
            if self.retry_at is None:
                return 0.0
            at = self.retry_at
        # Jobs held by a pause or by degraded mode: looked at again on a nudge (the rules
        # changed) or after IDLE_WAIT_SECONDS (aging, the backlog's spells).
        return min(IDLE_WAIT_SECONDS, max(0.0, (at - self.now_ms()) / 1000))

    def _step_safely(self) -> None:
        try:
            close_old_connections()
            self.step()
        except (DatabaseError, InterfaceError, OSError) as exc:
            log.warning("%s: database error, trying again: %s", self.name, exc)
            tempo_connection().close()
            time.sleep(ERROR_PAUSE_SECONDS)

    def step(self) -> None:
        """Claim what each limited queue has room for, best queue first; plan when to look
        again at what its limits held back: the earliest look a claim asks for, else after
        IDLE_WAIT_SECONDS (jobs held by a pause or by degraded mode). A nudge that came
        while claiming means: look again at once."""
        with self.lock:
            now = self.now_ms()
            if self.retry_at is not None and now < self.retry_at:
                return
            self._nudged = False
            queues = self.ready.queues()
        rules, floor = self.rules(), self.min_priority()
        plans = [
            self._claim_queue(queue, candidates=rules.candidates(queue), floor=floor)
            for queue in queues
            if not rules.paused(queue)  # a paused queue waits for the NOTIFY of its resume
        ]
        planned = [at for at in plans if at is not None]
        with self.lock:
            if self._nudged:
                self.retry_at = None
            else:
                self.retry_at = min(planned) if planned else now + IDLE_WAIT_SECONDS * 1000

    def _claim_queue(self, queue: str, *, candidates: int, floor: int) -> float | None:
        """Claim the queue's first jobs; return when to look at it again (database ms), or
        None: nothing of it is due for a claim."""
        now = self.now_ms()
        with self.lock:
            due = self.ready.first(queue, candidates, now_ms=now, min_priority=floor)
        if not due:
            return None
        outcome = self.claim(due, queue)
        held = set(outcome.held)
        with self.lock:
            for job_id in due:
                if job_id not in held:
                    self.ready.remove(job_id)
            if held:  # a rate limit's next start, or soon: a slot frees when a job ends
                pause = LIMITED_FULL_RETRY_MS if len(held) == len(due) else LIMITED_RETRY_MS
                return outcome.retry_at_ms or now + pause
            if self.ready.count(queue, min_priority=floor):
                return now  # more than one claim's candidates: again at once
        return None
