"""Reads for the queues page and the API: each queue's due and running jobs, its settings,
whether a live worker serves it; and the routing mode with each dispatcher's reason.

Both counts read small, indexed sets: due jobs are those of `job_due_idx` up to now,
claimed and running ones those of `job_active_queue_idx`."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import Count
from django.utils import timezone

from tasksapp.engine.models import (
    DUE_STATES,
    LEASED_STATES,
    Dispatcher,
    Job,
    JobQueue,
    RoutingMode,
    WorkerProcess,
)
from tasksapp.engine.settings import DEFAULT_QUEUE
from tasksapp.web.selectors.dashboard import LIVE_SECONDS


@dataclass(frozen=True)
class QueueRow:
    name: str
    due: int  # due by now, not claimed yet
    active: int  # claimed or running
    served: bool  # a live worker consumes its Celery queue
    paused: bool
    concurrency_limit: int | None
    key_concurrency_limit: int | None
    rate_limit: int | None
    rate_period: float | None

    @property
    def unserved(self) -> bool:
        return not self.served and (self.due > 0 or self.active > 0)

    @property
    def limits(self) -> list[str]:
        """The limits in words, for the page."""
        words = []
        if self.concurrency_limit is not None:
            words.append(f"≤ {self.concurrency_limit} at once")
        if self.key_concurrency_limit is not None:
            words.append(f"≤ {self.key_concurrency_limit} per key")
        if self.rate_limit is not None:
            words.append(f"≤ {self.rate_limit} starts / {self.rate_period:g} s")
        return words


def _counts(jobs) -> dict[str, int]:
    return dict(jobs.values("queue").annotate(n=Count("id")).values_list("queue", "n"))


def _served_queues(now: dt.datetime) -> set[str]:
    live = WorkerProcess.objects.filter(heartbeat_at__gte=now - dt.timedelta(seconds=LIVE_SECONDS))
    return {queue for queues in live.values_list("queues", flat=True) for queue in queues or []}


def queue_list(*, now: dt.datetime | None = None) -> list[QueueRow]:
    """Every queue with settings, due or active jobs, or a worker: unserved ones first."""
    now = now or timezone.now()
    due = _counts(Job.objects.filter(state__in=DUE_STATES, run_at__lte=now))
    active = _counts(Job.objects.filter(state__in=LEASED_STATES))
    served = _served_queues(now)
    settings = {queue.name: queue for queue in JobQueue.objects.all()}
    names = {DEFAULT_QUEUE, *due, *active, *served, *settings}
    rows = [_row(name, due, active, served, settings.get(name)) for name in names]
    return sorted(rows, key=lambda row: (not row.unserved, row.name))


def _row(name, due, active, served, settings: JobQueue | None) -> QueueRow:
    return QueueRow(
        name=name,
        due=due.get(name, 0),
        active=active.get(name, 0),
        served=name in served,
        paused=bool(settings and settings.paused),
        concurrency_limit=settings.concurrency_limit if settings else None,
        key_concurrency_limit=settings.key_concurrency_limit if settings else None,
        rate_limit=settings.rate_limit if settings else None,
        rate_period=settings.rate_period if settings else None,
    )


@dataclass(frozen=True)
class RoutingState:
    degraded: bool  # an operator switched it on
    reason: str
    critical_priority: int
    changed_at: dt.datetime | None
    dispatchers: list[dict[str, str]]  # live dispatchers claiming only critical work, and why

    @property
    def active(self) -> bool:
        return self.degraded or bool(self.dispatchers)


def routing_state(*, now: dt.datetime | None = None) -> RoutingState:
    now = now or timezone.now()
    mode = RoutingMode.objects.filter(id=1).first()
    live = Dispatcher.objects.filter(
        stopped_at__isnull=True, heartbeat_at__gte=now - dt.timedelta(seconds=LIVE_SECONDS)
    ).exclude(degraded_reason="")
    return RoutingState(
        degraded=bool(mode and mode.degraded),
        reason=mode.reason if mode else "",
        critical_priority=mode.critical_priority if mode else 9,
        changed_at=mode.changed_at if mode else None,
        dispatchers=[{"name": d.name, "reason": d.degraded_reason} for d in live],
    )


def queues_overview(*, now: dt.datetime | None = None) -> dict[str, Any]:
    """The queues and the routing mode, as JSON-ready data."""
    rows = queue_list(now=now)
    state = routing_state(now=now)
    return {
        "queues": [asdict(row) | {"unserved": row.unserved} for row in rows],
        "routing": asdict(state) | {"active": state.active},
    }
