"""Routing in the dispatcher: which due jobs are claimed first, and which queues wait.

- `ReadyJobs` holds the due jobs not yet claimed (backpressure, limits, a paused queue),
  per queue and priority. A turn takes the highest priority first, earlier run_at first
  within a priority. Nothing starves: a job's priority rises one level for every
  `aging_ms` it has waited past its run time (docs/ROUTING.md, "Priority").
- `RoutingRules` is the dispatcher's copy of the queues' settings and the routing mode,
  read when a NOTIFY says they changed and with every heartbeat. A queue without limits
  takes the plain claim; only limited queues take the claim that counts in the database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import NamedTuple

from tasksapp.engine.models import JobQueue, RoutingMode
from tasksapp.engine.options import DEFAULT_PRIORITY, DEFAULT_QUEUE, MAX_PRIORITY, MIN_PRIORITY
from tasksapp.engine.ratelimit import gcra_burst

LEVELS = range(MAX_PRIORITY, MIN_PRIORITY - 1, -1)  # highest first


class Route(NamedTuple):
    """What a dispatcher knows of a held job: its queue, priority and run time (ms)."""

    queue: str
    priority: int
    run_at_ms: float


def default_route(run_at_ms: float) -> Route:
    return Route(DEFAULT_QUEUE, DEFAULT_PRIORITY, run_at_ms)


class ReadyJobs:
    """Due jobs waiting to be claimed: per queue, one bucket per priority level, each in
    the order the jobs fell due (the timing wheel's order: run_at)."""

    def __init__(self, *, aging_ms: float) -> None:
        self.aging_ms = aging_ms
        self._queues: dict[str, list[dict[int, float]]] = {}
        self._route: dict[int, tuple[str, int]] = {}

    def __len__(self) -> int:
        return len(self._route)

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._route

    def queues(self) -> list[str]:
        """The queues holding jobs, the one with the highest priority job first."""
        held = [(name, buckets) for name, buckets in self._queues.items() if any(buckets)]
        held.sort(key=lambda item: -max(level for level in LEVELS if item[1][level]))
        return [name for name, _ in held]

    def count(self, queue: str, *, min_priority: int = MIN_PRIORITY) -> int:
        buckets = self._queues.get(queue, ())
        return sum(len(buckets[level]) for level in range(min_priority, len(buckets)))

    def add(self, job_id: int, route: Route) -> bool:
        """Hold the job (again); whether that is news: a job not held, or held with
        another queue or priority."""
        news = self._route.get(job_id) != (route.queue, route.priority)
        self.remove(job_id)
        buckets = self._queues.get(route.queue)
        if buckets is None:
            buckets = self._queues[route.queue] = [{} for _ in range(MAX_PRIORITY + 1)]
        buckets[route.priority][job_id] = route.run_at_ms
        self._route[job_id] = (route.queue, route.priority)
        return news

    def remove(self, job_id: int) -> None:
        where = self._route.pop(job_id, None)
        if where is not None:
            queue, priority = where
            del self._queues[queue][priority][job_id]

    def pop_queue(self, queue: str) -> list[tuple[int, Route]]:
        """Every job of `queue`, with its route, removed from the set."""
        buckets = self._queues.pop(queue, None) or []
        jobs = [
            (job_id, Route(queue, level, run_at_ms))
            for level, bucket in enumerate(buckets)
            for job_id, run_at_ms in bucket.items()
        ]
        for job_id, _ in jobs:
            del self._route[job_id]
        return jobs

    def remove_where(self, drop: Callable[[int], bool]) -> None:
        for job_id in [job_id for job_id in self._route if drop(job_id)]:
            self.remove(job_id)

    def first(
        self, queue: str, count: int, *, now_ms: float, min_priority: int = MIN_PRIORITY
    ) -> list[int]:
        """Up to `count` jobs of `queue` at or above `min_priority`, in claim order: the
        highest aged priority first, then the earliest run time. They stay in the set
        until removed (a limited queue's claim may hold some back)."""
        buckets = self._queues.get(queue)
        if not buckets:
            return []
        runs = {
            level: iter(buckets[level].items())
            for level in LEVELS
            if level >= min_priority and buckets[level]
        }
        heads = {level: next(run) for level, run in runs.items()}
        chosen: list[int] = []
        while len(heads) > 1 and len(chosen) < count:
            level = min(heads, key=lambda lv: self._order(lv, heads[lv][1], now_ms))
            chosen.append(heads[level][0])
            following = next(runs[level], None)
            if following is None:
                del heads[level]
            else:
                heads[level] = following
        for level, head in heads.items():  # one level left: the rest of it, in order
            if len(chosen) < count:
                chosen.append(head[0])
                chosen.extend(job_id for job_id, _ in islice(runs[level], count - len(chosen)))
        return chosen

    def _order(self, level: int, run_at_ms: float, now_ms: float) -> tuple[int, float]:
        """Claim order: highest aged priority, then earliest run time."""
        waited = max(0.0, now_ms - run_at_ms)
        aged = min(MAX_PRIORITY, level + int(waited // self.aging_ms))
        return -aged, run_at_ms


MAX_CANDIDATES = 500  # the most due jobs of a limited queue offered to one claim


@dataclass(frozen=True)
class QueueRule:
    name: str
    paused: bool = False
    limited: bool = False  # a concurrency, per-key or rate limit: claimed by the counting claim
    # How many of its due jobs to offer one claim: twice what its limits can let through
    # at once (all MAX_CANDIDATES with a per-key limit: keys at their limit are skipped).
    candidates: int = MAX_CANDIDATES
    # A concurrency limit bounds its claims in flight, so its Celery queue cannot fill:
    # the broker is not asked for the queue's backlog before each of its claims.
    bounded: bool = False


def candidates_for(queue: JobQueue) -> int:
    if queue.key_concurrency_limit is not None:
        return MAX_CANDIDATES
    at_once = [MAX_CANDIDATES]
    if queue.concurrency_limit is not None:
        at_once.append(queue.concurrency_limit)
    if queue.rate_limit is not None:
        at_once.append(gcra_burst(queue.rate_limit))
    return max(1, min(MAX_CANDIDATES, 2 * min(at_once)))


@dataclass(frozen=True)
class RoutingRules:
    """The queues' settings and the routing mode, as a dispatcher last read them."""

    queues: dict[str, QueueRule] = field(default_factory=dict)
    degraded: str = ""  # why the operator switched degraded mode on ("" when off)
    critical_priority: int = MAX_PRIORITY

    def paused(self, queue: str) -> bool:
        rule = self.queues.get(queue)
        return rule is not None and rule.paused

    def limited(self, queue: str) -> bool:
        rule = self.queues.get(queue)
        return rule is not None and rule.limited

    def bounded(self, queue: str) -> bool:
        rule = self.queues.get(queue)
        return rule is not None and rule.bounded

    def candidates(self, queue: str) -> int:
        rule = self.queues.get(queue)
        return rule.candidates if rule is not None else MAX_CANDIDATES


def routing_rules_read() -> RoutingRules:
    """The queues' settings and the routing mode as stored now (two small tables)."""
    queues = {
        row.name: QueueRule(
            row.name,
            paused=row.paused,
            limited=row.limited,
            candidates=candidates_for(row),
            bounded=row.concurrency_limit is not None,
        )
        for row in JobQueue.objects.all()
    }
    mode = RoutingMode.objects.filter(id=1).first()
    if mode is None:
        return RoutingRules(queues=queues)
    degraded = (mode.reason or "no reason given") if mode.degraded else ""
    return RoutingRules(queues, degraded=degraded, critical_priority=mode.critical_priority)
