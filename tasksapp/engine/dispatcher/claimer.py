"""Due jobs, claimed and published: per queue, highest priority first, as far as the
broker has room for them.

The due source hands over the jobs whose claim time has come (sources/); the claimer
holds them until they are claimed. A paused queue's jobs wait for the routing's change,
jobs below the critical priority wait while the dispatcher is degraded, and a queue
whose Celery queue is full is looked at again BACKPRESSURE_RETRY_MS later. The due jobs
of a limited queue go to the limited claimer, which claims them within the queue's
limits on a thread of its own (limited.py). Everything held is still `scheduled` in the
database: dropping it (a released partition, a stop, database trouble) loses nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from tasksapp.engine.dispatcher.broker import BrokerGate
from tasksapp.engine.dispatcher.limited import LimitedClaimer
from tasksapp.engine.dispatcher.routing import ReadyJobs, Route, RoutingRules
from tasksapp.engine.dispatcher.sources.base import (
    BACKPRESSURE_RETRY_MS,
    ClaimOutcome,
    DispatchClock,
)
from tasksapp.engine.options import MIN_PRIORITY
from tasksapp.engine.settings import TempoSettings
from tasksapp.engine.transitions import Claim, job_claim_due, job_claim_limited


class Claimer:
    def __init__(
        self, *, name: str, settings: TempoSettings, broker: BrokerGate, clock: DispatchClock
    ) -> None:
        self.name = name  # the owner of the claims
        self.ttl = settings.claim_ttl_seconds
        self.aging_ms = settings.priority_aging_seconds * 1000
        self.broker = broker
        self.clock = clock
        self.counters: Counter[str] = Counter()  # claims and statements, on the loop's thread
        self.rules = RoutingRules()
        self.floor = MIN_PRIORITY  # the lowest priority claimed now (critical: degraded)
        self.ready = ReadyJobs(aging_ms=self.aging_ms)  # due, not yet claimed
        self.retry_at: float | None = None  # when jobs held back are looked at again
        self.limited = LimitedClaimer(
            claim=self._claim_limited,
            rules=lambda: self.rules,
            min_priority=lambda: self.floor,
            now_ms=clock.now_ms,
            aging_ms=self.aging_ms,
            name=f"{name} limited claimer",
        )

    # -- what is held -------------------------------------------------------------------
    def route_by(self, rules: RoutingRules, floor: int) -> None:
        """The queues' settings and the lowest priority claimed now: the limited claimer
        looks at its jobs again at once when they change (a queue resumed, a limit raised,
        degraded mode ended)."""
        changed = rules is not self.rules or floor != self.floor
        self.rules, self.floor = rules, floor
        if changed:
            self.limited.nudge()

    def add(self, jobs: list[tuple[int, Route]]) -> None:
        for job_id, route in jobs:
            self.ready.add(job_id, route)

    def withdraw(self, job_id: int) -> None:
        """The job is due no more (cancelled) or later (rescheduled)."""
        self.ready.remove(job_id)
        self.limited.remove(job_id)

    def drop_where(self, drop: Callable[[int], bool]) -> None:
        self.ready.remove_where(drop)
        self.limited.remove_where(drop)

    def forget(self) -> None:
        self.ready = ReadyJobs(aging_ms=self.aging_ms)
        self.retry_at = None
        self.limited.clear()

    def waiting(self) -> int:
        """How many due jobs are held unclaimed now (backpressure, limits, pauses)."""
        return len(self.ready) + self.limited.waiting()

    def next_deadline(self) -> float | None:
        """When to look again at the jobs held back by a full queue (None: no such job)."""
        return self.retry_at

    def stop(self) -> None:
        self.limited.stop()

    # -- claims -------------------------------------------------------------------------
    def claim_due(self) -> int:
        """Claim and publish what each queue has room for; how many claims were made."""
        self.retry_at = None
        made = 0
        for queue in self.ready.queues():
            if self.rules.limited(queue):
                self._hand_over(queue)
            elif not self.rules.paused(queue):
                made += self._claim_queue(queue)
        return made

    def _hand_over(self, queue: str) -> None:
        self.limited.offer(self.ready.pop_queue(queue))

    def _claim_queue(self, queue: str) -> int:
        """Claim what the queue has room for, best first; plan when to look again at what
        is left (a paused queue, or jobs below the critical priority, wait for a NOTIFY
        that the routing changed)."""
        waiting = self.ready.count(queue, min_priority=self.floor)
        if not waiting:
            return 0
        room = self.broker.room_for(waiting, queue)
        made = 0
        if room > 0:
            now = self.clock.now_ms()
            due = self.ready.first(queue, room, now_ms=now, min_priority=self.floor)
            claims, _ = self.claim(due, None)
            self.counters.update(
                statements=1, claims=len(claims), claims_lost=len(due) - len(claims)
            )
            for job_id in due:
                self.ready.remove(job_id)
            made = len(claims)
            if room >= waiting:
                return made
        self._retry_at(self.clock.now_ms() + BACKPRESSURE_RETRY_MS)
        return made

    def _retry_at(self, at_ms: float) -> None:
        self.retry_at = at_ms if self.retry_at is None else min(self.retry_at, at_ms)

    def claim(self, due: list[int], limited_queue: str | None) -> tuple[list[Claim], ClaimOutcome]:
        """Claim these ids (fenced: only rows still due are won) and publish the claims,
        each to its queue. Ids of a limited queue are claimed within its limits, counted
        in the database; those held back by them are returned."""
        if limited_queue is None:
            claims, outcome = job_claim_due(ids=due, owner=self.name, ttl=self.ttl), ClaimOutcome()
        else:
            limited = job_claim_limited(
                queue=limited_queue, ids=due, owner=self.name, ttl=self.ttl, room=len(due)
            )
            claims, outcome = limited.claims, ClaimOutcome(limited.held, limited.next_start_ms)
        for queue, queue_claims in _by_queue(claims).items():
            if not self.broker.publish(queue, queue_claims):
                break
        return claims, outcome

    def _claim_limited(self, due: list[int], queue: str) -> ClaimOutcome:
        """The limited claimer's claim, on its thread and connection: as many as the
        queue's Celery queue has room for (unless a concurrency limit bounds it), within
        the queue's limits, published. Its counts go to the limited claimer (the loop
        takes them), a broker error to the broker gate (the loop hears it)."""
        rest: list[int] = []
        if not self.rules.bounded(queue):
            room = self.broker.room_for(len(due), queue)
            if room <= 0:
                return ClaimOutcome(due, self.clock.now_ms() + BACKPRESSURE_RETRY_MS)
            due, rest = due[:room], due[room:]
        claims, outcome = self.claim(due, queue)
        self.limited.count_claims(
            claims=len(claims), lost=len(due) - len(claims) - len(outcome.held)
        )
        return ClaimOutcome(outcome.held + rest, outcome.retry_at_ms)


def _by_queue(claims: list[Claim]) -> dict[str, list[Claim]]:
    grouped: dict[str, list[Claim]] = {}
    for claim in claims:
        grouped.setdefault(claim.queue, []).append(claim)
    return grouped
