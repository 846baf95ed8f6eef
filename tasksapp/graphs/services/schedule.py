"""Scheduling a graph job: plan first, then store the parent job and its GraphRun in one
transaction. No plan (or any bad input) raises GraphInputError and stores nothing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.jsonvalues import JsonValueError, checked_json
from tasksapp.engine.models import Delivery
from tasksapp.engine.options import JobOptionsError, validated_handler, validated_retry_policy
from tasksapp.engine.services import (
    ERR_KEY_CONFLICT,
    IdempotencyConflict,
    job_schedule_or_get,
)
from tasksapp.engine.settings import tempo_settings
from tasksapp.graphs.models import GraphRun, Strategy
from tasksapp.graphs.planner import PlanningError, graph_plan

from .common import START_HANDLER, GraphInputError

ERR_HAS = "has must be an object of the job's initial values by proposition name."
ERR_WANTS = "wants must be a non-empty list of proposition names."
ERR_STRATEGY = "strategy must be one of: {choices}."
ERR_BOUND = "{field} must be an integer between {low} and {high}."
ERR_KEY_TAKEN = "idempotency key {key!r} belongs to a job that is not a graph job."

START_ATTEMPTS = 5
# Planning runs inside the request that schedules: past this many seconds it stops with
# a "no plan within ... s" error instead of holding the request (a parameterised task
# over a hundred objects can otherwise take minutes).
PLAN_SECONDS = 5.0
START_POLICY = {"delays": [0.5, 1.0, 2.0, 5.0]}


def _validated_has(has: Any) -> dict[str, Any]:
    if not isinstance(has, Mapping) or not all(isinstance(key, str) for key in has):
        raise GraphInputError(ERR_HAS)
    limits = tempo_settings()
    try:
        return checked_json(
            dict(has),
            what="has",
            max_bytes=limits.max_payload_bytes,
            max_depth=limits.max_json_depth,
            limit_name="TEMPO_MAX_PAYLOAD_BYTES",
        )
    except JsonValueError as exc:
        raise GraphInputError(str(exc)) from exc


def _validated_wants(wants: Any) -> list[str]:
    if isinstance(wants, str | bytes) or not isinstance(wants, Iterable):
        raise GraphInputError(ERR_WANTS)
    names = sorted(set(wants))
    if not names or not all(isinstance(name, str) and name for name in names):
        raise GraphInputError(ERR_WANTS)
    return names


def _bounded(value: Any, *, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise GraphInputError(ERR_BOUND.format(field=field, low=low, high=high))
    return value


def _validated_strategy(strategy: Any) -> str:
    if strategy not in Strategy.values:
        raise GraphInputError(ERR_STRATEGY.format(choices=", ".join(Strategy.values)))
    return strategy


def _validated_task_retry_policy(policy: Any) -> dict[str, Any]:
    """Delays between reruns of a failed task: a job retry policy, checked as one."""
    try:
        return validated_retry_policy(policy)
    except JobOptionsError as exc:
        raise GraphInputError(str(exc)) from exc


def _validated_on_complete(handler: Any) -> str:
    """A registered handler's name, or "" for none."""
    if handler is None or handler == "":
        return ""
    try:
        return validated_handler(handler)
    except JobOptionsError as exc:
        raise GraphInputError(f"on_complete: {exc}") from exc


def _planned(has: dict[str, Any], wants: list[str]) -> dict[str, Any]:
    try:
        return graph_plan(has=has, wants=wants, seconds=PLAN_SECONDS).as_dict()
    except PlanningError as exc:
        raise GraphInputError(str(exc), goals=exc.goals, missing=exc.missing) from exc


def graph_job_schedule(
    *,
    has: Mapping[str, Any],
    wants: Iterable[str],
    strategy: str = Strategy.ABORT,
    run_at: dt.datetime | None = None,
    idempotency_key: str | None = None,
    max_restarts: int = 2,
    task_retry_policy: dict | None = None,
    max_task_attempts: int = 3,
    on_complete: str | None = None,
) -> GraphRun:
    """Plan "has → wants" with the registered graph tasks and store a graph job that
    starts at ``run_at`` (default now). The same idempotency key again returns the
    existing GraphRun unchanged.

    ``strategy`` decides what a failed task leads to: ``abort``; ``rerun`` (rescue hook,
    then retry the task after ``task_retry_policy`` delays, at most ``max_task_attempts``
    runs, then abort); ``restart`` (at most ``max_restarts`` times, then abort);
    ``rollback``.

    ``on_complete`` names a registered handler: when the graph ends (whatever its
    outcome) a job of its own runs it, its payload holding ``graph_run_id``,
    ``graph_job_id``, ``state``, ``result`` (the wanted values) and ``error``.
    """
    graph, _ = graph_job_schedule_or_get(
        has=has,
        wants=wants,
        strategy=strategy,
        run_at=run_at,
        idempotency_key=idempotency_key,
        max_restarts=max_restarts,
        task_retry_policy=task_retry_policy,
        max_task_attempts=max_task_attempts,
        on_complete=on_complete,
    )
    return graph


def graph_job_schedule_or_get(
    *,
    has: Mapping[str, Any],
    wants: Iterable[str],
    strategy: str = Strategy.ABORT,
    run_at: dt.datetime | None = None,
    idempotency_key: str | None = None,
    max_restarts: int = 2,
    task_retry_policy: dict | None = None,
    max_task_attempts: int = 3,
    on_complete: str | None = None,
) -> tuple[GraphRun, bool]:
    """graph_job_schedule, telling whether this call stored the graph job (True) or
    found it under its key (False); the key with another request raises
    IdempotencyConflict."""
    has, wants = _validated_has(has), _validated_wants(wants)
    strategy = _validated_strategy(strategy)
    policy = _validated_task_retry_policy(task_retry_policy)
    max_restarts = _bounded(max_restarts, field="max_restarts", low=0, high=100)
    max_task_attempts = _bounded(max_task_attempts, field="max_task_attempts", low=1, high=100)
    on_complete = _validated_on_complete(on_complete)
    plan = _planned(has, wants)
    with tempo_atomic():
        try:
            job, created = job_schedule_or_get(
                handler=START_HANDLER,
                run_at=timezone.now() if run_at is None else run_at,
                idempotency_key=idempotency_key,
                max_attempts=START_ATTEMPTS,
                retry_policy=START_POLICY,
                delivery=Delivery.TRANSACTIONAL,
            )
        except IdempotencyConflict as exc:
            raise GraphInputError(ERR_KEY_TAKEN.format(key=idempotency_key)) from exc
        existing = GraphRun.objects.filter(job=job).first()
        if existing is not None:
            asked = {"has": has, "wants": wants, "strategy": strategy, "on_complete": on_complete}
            return _same_graph(existing, asked), False
        graph = GraphRun.objects.create(
            job=job,
            has=has,
            wants=wants,
            strategy=strategy,
            plan=plan,
            max_restarts=max_restarts,
            max_task_attempts=max_task_attempts,
            task_retry_policy=policy,
            on_complete=on_complete,
        )
        return graph, created


def _same_graph(graph: GraphRun, asked: dict[str, Any]) -> GraphRun:
    """The stored graph job, if it is the one asked for again; else IdempotencyConflict."""
    differ = [name for name, value in asked.items() if getattr(graph, name) != value]
    if differ:
        message = ERR_KEY_CONFLICT.format(
            key=graph.job.idempotency_key, job_id=graph.job_id, fields=", ".join(differ)
        )
        raise IdempotencyConflict(message, job_id=graph.job_id)
    return graph
