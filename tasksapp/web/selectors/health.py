"""Is work getting done? Per queue, the jobs due and not started and the age of the oldest
of them, and the dispatchers and workers heard from lately.

A stall shows here whatever its cause (workers busy or frozen, a broker that backs up, no
dispatcher): due work that nobody starts grows old. Start lag alone cannot show it, since
it is measured on jobs that did start.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Count, Min, Q
from django.utils import timezone

from tasksapp.engine.models import Dispatcher, Job, JobQueue, JobState, WorkerProcess
from tasksapp.engine.models.jobs import DUE_STATES
from tasksapp.engine.settings import DEFAULT_QUEUE

LIVE_SECONDS = 30.0  # three missed heartbeats (every 10 s) and a process counts as down
# The oldest due job may wait this long before the system counts as stalled (a claim's
# lifetime and a retry's round with room to spare); TEMPO_HEALTH_STALL_SECONDS sets it.
DEFAULT_STALL_SECONDS = 60.0
DUE_COUNT_CAP = 100_000  # due jobs counted exactly up to this many (the oldest first)

ERR_STALLED = "queue {queue}: its oldest due job has waited {age:.0f} s (limit {limit:.0f} s)"
ERR_NO_DISPATCHER = "queue {queue} has due work and no live dispatcher"
ERR_NO_WORKER = "queue {queue} has due work and no live worker serving it"


@dataclass(frozen=True)
class QueueHealth:
    queue: str
    due: int  # due and not started: waiting to be claimed, or claimed and not started
    oldest_due_seconds: float | None
    paused: bool
    workers: int  # live workers serving it


@dataclass(frozen=True)
class ProcessBeat:
    name: str
    last_beat_seconds: float
    alive: bool
    queues: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Health:
    healthy: bool
    problems: list[str]
    queues: list[QueueHealth]
    dispatchers: list[ProcessBeat]
    workers: list[ProcessBeat]
    stall_seconds: float

    @property
    def status(self) -> str:
        return "ok" if self.healthy else "unhealthy"


def stall_seconds() -> float:
    return float(getattr(settings, "TEMPO_HEALTH_STALL_SECONDS", DEFAULT_STALL_SECONDS))


def health_read(*, now: dt.datetime | None = None) -> Health:
    """The health of the whole system as the database sees it, at `now`."""
    now = now or timezone.now()
    dispatchers = _dispatchers(now)
    workers = _workers(now)
    paused = set(JobQueue.objects.filter(paused=True).values_list("name", flat=True))
    queues = _due_by_queue(now, paused, workers)
    limit = stall_seconds()
    problems = _problems(queues, dispatchers, limit)
    return Health(not problems, problems, queues, dispatchers, workers, limit)


def _due_by_queue(
    now: dt.datetime, paused: set[str], workers: list[ProcessBeat]
) -> list[QueueHealth]:
    waiting = _oldest_first(
        Job.objects.filter(state__in=DUE_STATES, run_at__lte=now).order_by("run_at")
    )
    claimed = Job.objects.filter(state=JobState.CLAIMED, run_at__lte=now)
    claimed_rows = claimed.values("queue").annotate(n=Count("id"), oldest=Min("run_at"))
    due: dict[str, tuple[int, dt.datetime]] = {}
    for rows in (waiting, claimed_rows):
        for row in rows:
            count, oldest = due.get(row["queue"], (0, row["oldest"]))
            due[row["queue"]] = (count + row["n"], min(oldest, row["oldest"]))
    serving = _serving(workers)
    names = sorted(set(due) | paused | set(serving) | {DEFAULT_QUEUE})
    return [
        QueueHealth(
            queue=name,
            due=due.get(name, (0, None))[0],
            oldest_due_seconds=_age(now, due[name][1]) if name in due else None,
            paused=name in paused,
            workers=serving.get(name, 0),
        )
        for name in names
    ]


def _oldest_first(due_jobs) -> list[dict]:
    """Per queue, the count and oldest run time of the due jobs, of the DUE_COUNT_CAP
    oldest (a backlog of millions is not counted to the last row at each look)."""
    ids = due_jobs.values("id")[:DUE_COUNT_CAP]
    return list(
        Job.objects.filter(id__in=ids)
        .values("queue")
        .annotate(n=Count("id"), oldest=Min("run_at"))
        .order_by()
    )


def _serving(workers: list[ProcessBeat]) -> dict[str, int]:
    serving: dict[str, int] = {}
    for worker in workers:
        if worker.alive:
            for queue in worker.queues or [DEFAULT_QUEUE]:
                serving[queue] = serving.get(queue, 0) + 1
    return serving


def _problems(queues: list[QueueHealth], dispatchers: list[ProcessBeat], limit: float) -> list:
    problems = []
    any_dispatcher = any(d.alive for d in dispatchers)
    for q in queues:
        if not q.due or q.paused:
            continue
        age = q.oldest_due_seconds
        if age is not None and age > limit:
            problems.append(ERR_STALLED.format(queue=q.queue, age=age, limit=limit))
        if not any_dispatcher:
            problems.append(ERR_NO_DISPATCHER.format(queue=q.queue))
        if not q.workers:
            problems.append(ERR_NO_WORKER.format(queue=q.queue))
    return problems


def _dispatchers(now: dt.datetime) -> list[ProcessBeat]:
    recent = Dispatcher.objects.filter(
        Q(stopped_at__isnull=True) | Q(stopped_at__gte=now - dt.timedelta(hours=1)),
        heartbeat_at__gte=now - dt.timedelta(hours=1),
    ).order_by("name")
    return [
        ProcessBeat(
            d.name,
            _age(now, d.heartbeat_at),
            d.stopped_at is None and _age(now, d.heartbeat_at) <= LIVE_SECONDS,
        )
        for d in recent
    ]


def _workers(now: dt.datetime) -> list[ProcessBeat]:
    recent = WorkerProcess.objects.filter(heartbeat_at__gte=now - dt.timedelta(hours=1)).order_by(
        "name"
    )
    return [
        ProcessBeat(
            w.name,
            _age(now, w.heartbeat_at),
            _age(now, w.heartbeat_at) <= LIVE_SECONDS,
            list(w.queues or []),
        )
        for w in recent
    ]


def _age(now: dt.datetime, then: dt.datetime) -> float:
    return max(0.0, (now - then).total_seconds())
