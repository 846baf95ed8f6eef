"""Operators' settings of queues and of the routing mode (docs/ROUTING.md): pause and
resume a queue, set or clear its limits, switch degraded mode on and off. Bad input
raises JobInputError and stores nothing. Every change tells the dispatchers at once
(NOTIFY after commit); they also read the settings with every heartbeat."""

from __future__ import annotations

import math
from typing import Any

from django.db.models.functions import Now

from tasksapp.engine.cluster import cluster, sql
from tasksapp.engine.db import tempo_atomic, tempo_on_commit
from tasksapp.engine.jsonvalues import JsonValueError, checked_text
from tasksapp.engine.models import JobQueue, RoutingMode
from tasksapp.engine.options import (
    MAX_PRIORITY,
    JobOptionsError,
    validated_priority,
    validated_queue,
)
from tasksapp.engine.services import JobInputError

ERR_LIMIT = "{field} must be a whole number from 1 to 1000000, or empty for no limit."
ERR_RATE_PERIOD = "rate_period must be a number of seconds from 0.001 to 86400."
ERR_REASON = "reason must be a string of at most 200 characters."
MAX_LIMIT = 1_000_000
MAX_RATE_PERIOD = 86_400.0
MAX_REASON = 200
UNCHANGED: Any = object()  # a setting left as it is
LIMIT_FIELDS = ("concurrency_limit", "key_concurrency_limit", "rate_limit")


def _checked_name(name: Any) -> str:
    try:
        return validated_queue(name)
    except JobOptionsError as exc:
        raise JobInputError(str(exc)) from exc


def _checked_limit(field: str, value: Any) -> int | None:
    if value is None:
        return None
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole or not 1 <= value <= MAX_LIMIT:
        raise JobInputError(ERR_LIMIT.format(field=field))
    return value


def _checked_period(value: Any) -> float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not 0.001 <= value <= MAX_RATE_PERIOD:
        raise JobInputError(ERR_RATE_PERIOD)
    return float(value)


def _announce() -> None:
    """Tell every dispatcher, once the change is committed."""
    tempo_on_commit(lambda: cluster().notify(sql.ROUTING_CHANGED))


def queue_configure(
    *,
    name: Any,
    paused: Any = UNCHANGED,
    concurrency_limit: Any = UNCHANGED,
    key_concurrency_limit: Any = UNCHANGED,
    rate_limit: Any = UNCHANGED,
    rate_period: Any = UNCHANGED,
) -> JobQueue:
    """Create or change a queue's settings; the ones not given stay. A limit of None
    removes it. Takes effect without a restart: dispatchers are told at once."""
    changes: dict[str, Any] = {"name": _checked_name(name)}
    if paused is not UNCHANGED:
        if not isinstance(paused, bool):
            raise JobInputError("paused must be true or false.")
        changes["paused"] = paused
    for field, value in zip(
        LIMIT_FIELDS, (concurrency_limit, key_concurrency_limit, rate_limit), strict=True
    ):
        if value is not UNCHANGED:
            changes[field] = _checked_limit(field, value)
    if rate_period is not UNCHANGED:
        changes["rate_period"] = _checked_period(rate_period)
    with tempo_atomic():
        queue, _ = JobQueue.objects.select_for_update().get_or_create(name=changes.pop("name"))
        for field, value in changes.items():
            setattr(queue, field, value)
        queue.updated_at = Now()
        queue.save()
        _announce()
    queue.refresh_from_db()
    return queue


def queue_pause(*, name: Any) -> JobQueue:
    """Dispatchers stop claiming the queue's jobs; jobs already claimed or running finish."""
    return queue_configure(name=name, paused=True)


def queue_resume(*, name: Any) -> JobQueue:
    return queue_configure(name=name, paused=False)


def routing_degrade(*, reason: Any, critical_priority: Any = MAX_PRIORITY) -> RoutingMode:
    """Degraded mode on: only jobs at or above `critical_priority` are claimed."""
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise JobInputError(ERR_REASON)
    try:
        checked_text(reason, what="reason")  # NUL, lone surrogates: not storable
    except JsonValueError as exc:
        raise JobInputError(str(exc)) from exc
    try:
        critical = validated_priority(critical_priority)
    except JobOptionsError as exc:
        raise JobInputError(str(exc).replace("priority", "critical_priority", 1)) from exc
    return _set_mode(degraded=True, reason=reason, critical_priority=critical)


def routing_restore() -> RoutingMode:
    """Degraded mode off: the jobs held back are claimed, highest priority first."""
    return _set_mode(degraded=False, reason="")


def _set_mode(**fields: Any) -> RoutingMode:
    with tempo_atomic():
        mode, _ = RoutingMode.objects.select_for_update().get_or_create(id=1)
        for field, value in fields.items():
            setattr(mode, field, value)
        mode.changed_at = Now()
        mode.save()
        _announce()
    mode.refresh_from_db()
    return mode
