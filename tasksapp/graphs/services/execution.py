"""Running a graph: its start (the parent job) and each task (one child job per run).

A task's child job is transactional. Its handler gathers the inputs and calls the task
with no lock held, so tasks of one graph run in parallel. Then, still in the child job's
transaction, it locks the GraphRun row and records the outcome: the result, the merged
values and the release of every dependant whose predecessors have all succeeded — or the
failure and what the graph's strategy makes of it (`failures.py`). The engine commits
that together with the child job's success, so it happens exactly once; a worker that dies
before the commit leaves nothing behind, and the engine runs the child job again.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from django.utils import timezone

from tasksapp.engine import retry
from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.models import Job
from tasksapp.graphs import sql
from tasksapp.graphs.models import GraphRun, GraphState, Strategy, TaskRun, TaskState
from tasksapp.graphs.planner import Plan, PlanningError, graph_plan
from tasksapp.graphs.registry import GraphTaskError, TaskSpec, default_registry

from . import failures
from .common import (
    ERR_OUTPUT_JSON,
    ERR_REPLAN,
    ERR_TASK_TIME_LIMIT,
    ERR_WORKER_LOST,
    Outcome,
    TaskRow,
    describe,
    graph_ended,
    locked,
    plan_of,
    record_outcome,
    release,
    task_rows,
)


class WorkerLost(RuntimeError):
    """Passed to a rescue hook when the task's worker was lost rather than the task
    raising."""


# --- the parent job -------------------------------------------------------------------


def _current_plan(graph: GraphRun) -> Plan | None:
    """The stored plan, or a new one if the registered tasks changed since scheduling;
    None (and the graph aborted) if they no longer allow a plan."""
    plan = Plan.from_dict(graph.plan)
    if plan.fingerprint == default_registry.fingerprint():
        return plan
    try:
        plan = graph_plan(has=graph.has, wants=graph.wants)
    except PlanningError as exc:
        failures.graph_stop(graph, state=GraphState.ABORTED, error=ERR_REPLAN.format(reason=exc))
        return None
    graph.plan = plan.as_dict()
    return plan


def graph_start(*, job_id: int) -> dict[str, Any]:
    """pending → running: one TaskRun per task, and a child job for each task that runs
    after no other. Runs in the parent job's transaction, so it happens once."""
    with tempo_atomic(savepoint=False):
        graph = GraphRun.objects.select_for_update().get(job_id=job_id)
        if graph.state != GraphState.PENDING:
            return {"graph_run_id": graph.id, "state": graph.state}
        plan = _current_plan(graph)
        if plan is None:
            return {"graph_run_id": graph.id, "state": GraphState.ABORTED}
        runs = TaskRun.objects.bulk_create(
            TaskRun(graph_run=graph, task=name, layer=step.layer)
            for name, step in plan.steps.items()
        )
        graph.state, graph.started_at, graph.values = GraphState.RUNNING, timezone.now(), graph.has
        graph.save(update_fields=["plan", "state", "started_at", "values"])
        roots = set(plan.ready(()))
        started = release(graph, [run for run in runs if run.task in roots])
        if not runs:
            _finish(graph, plan)
        return {"graph_run_id": graph.id, "tasks": len(runs), "started": started}


# --- a task's child job ---------------------------------------------------------------


class RunRead(NamedTuple):
    """A task's run and its graph, as read (unlocked) before the task is called."""

    task: str
    state: str
    job_id: int | None
    attempts: int
    rescued: dict[str, Any]
    errors: list
    graph_id: int
    graph_state: str
    strategy: str
    has: dict[str, Any]
    generation: int
    started_at: Any
    task_retry_policy: dict
    max_task_attempts: int

    @classmethod
    def load(cls, task_run_id: int) -> RunRead | None:
        row = sql.fetch_one(sql.statement(sql.RUN_READ), [task_run_id])
        if row is None:  # the graph was deleted
            return None
        row = list(row)
        for index in (4, 5, 9, 12):  # rescued, errors, has, task_retry_policy
            row[index] = sql.loads(row[index])
        return cls(*row)


def _inputs(read: RunRead, spec: TaskSpec, plan: Plan) -> dict[str, Any]:
    """Each required value from the job's has or from the task that provides it; the
    optional names the job has; what a rescue hook replaced."""
    needs = plan.steps[read.task].needs
    providers = sorted({src for src in needs.values() if src is not None})
    outputs = {}
    if providers:
        query = sql.statement(sql.RESULTS, names=sql.placeholders(len(providers)))
        rows = sql.fetch_all(query, [read.graph_id, *providers])
        outputs = {task: sql.loads(result) for task, result in rows}
    has = read.has
    inputs = {p: has[p] if src is None else outputs[src][p] for p, src in needs.items()}
    inputs.update({name: has[name] for name in spec.optional if name in has})
    inputs.update(read.rescued)
    return inputs


def _retry_in(read: RunRead, spec: TaskSpec | None) -> float | None:
    """When a failed run is tried again: first by the task's own options (max_attempts,
    retry_policy), then, with the rerun strategy, by the graph's; None: the strategy
    decides."""
    attempt = read.attempts + 1
    own = spec.options if spec is not None else None
    if own is not None:
        decision = retry.decide(own.retry_policy, attempt=attempt, max_attempts=own.max_attempts)
        if decision.retry:
            return decision.delay
    if read.strategy != Strategy.RERUN:
        return None
    policy = read.task_retry_policy or retry.DEFAULT_POLICY
    decision = retry.decide(policy, attempt=attempt, max_attempts=read.max_task_attempts)
    return decision.delay if decision.retry else None


def _rescued(read: RunRead, spec: TaskSpec | None, outcome: Outcome, exc) -> None:
    """Whether and when the task will be retried, and what its rescue hook replaces in
    the inputs (called here, before the graph is locked: it may be slow)."""
    outcome.retry_in = _retry_in(read, spec)
    if outcome.retry_in is None:
        return
    if spec is not None and spec.rescue is not None and outcome.inputs is not None:
        try:
            outcome.rescued = dict(spec.rescue(dict(outcome.inputs), exc) or {})
        except Exception as rescue_exc:  # the retry goes ahead without it
            outcome.error += f" (rescue failed: {describe(rescue_exc)})"


def _run(read: RunRead, *, lost: str | None) -> Outcome:
    """Call the task (no lock is held), or record the lost worker instead."""
    spec = None
    outcome = Outcome(inputs=None, started_at=timezone.now(), finished_at=None)
    try:
        spec = default_registry.get(read.task)
        outcome.inputs = _inputs(read, spec, plan_of(read.graph_id, read.started_at))
        if lost is not None:
            raise WorkerLost(lost)
        outcome.started_at = timezone.now()
        outputs = spec.call(outcome.inputs)
        outcome.finished_at = timezone.now()
        try:
            outcome.outputs = json.loads(json.dumps(outputs, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise GraphTaskError(ERR_OUTPUT_JSON.format(task=read.task, reason=exc)) from exc
    except Exception as exc:  # the task's own failure, whatever it is
        outcome.finished_at = outcome.finished_at or timezone.now()
        outcome.outputs, outcome.error = None, str(exc) if lost else describe(exc)
        _rescued(read, spec, outcome, exc)
    return outcome


def _lost_worker(job_id: int, attempt: int, max_attempts: int) -> str | None:
    """The failure to record instead of calling the task: the previous attempt of the
    child job passed the task's time limit (the run failed: its retries and the strategy
    decide what follows), or this is the last attempt after lost ones."""
    if attempt == 1:
        return None
    last, errors = Job.objects.filter(id=job_id).values_list("last_error", "errors").first()
    if errors and isinstance(errors[-1], dict) and errors[-1].get("kind") == "time_limit":
        return ERR_TASK_TIME_LIMIT.format(error=last)
    if attempt < max_attempts:
        return None
    return ERR_WORKER_LOST.format(lost=attempt - 1, last=last or "unknown")


def task_run_execute(
    *, task_run_id: int, job_id: int, attempt: int = 1, max_attempts: int = 1
) -> dict[str, Any]:
    """Run one task for its child job ``job_id`` (attempt ``attempt`` of
    ``max_attempts``) and record the outcome. Returns what the child job records."""
    read = RunRead.load(task_run_id)
    if read is None:
        return {"task_run_id": task_run_id, "outcome": "stale"}
    if read.job_id != job_id or read.state != TaskState.READY:
        return {"task": read.task, "outcome": "stale"}
    outcome = None
    if read.graph_state == GraphState.RUNNING:
        outcome = _run(read, lost=_lost_worker(job_id, attempt, max_attempts))
    with tempo_atomic(savepoint=False):
        return {"task": read.task, **_settle(read, task_run_id, job_id, outcome)}


class GraphLocked(NamedTuple):
    """The graph's row as locked for a completion."""

    id: int
    state: str
    has: dict[str, Any]
    values: dict[str, Any]
    generation: int
    started_at: Any


def _lock(graph_run_id: int) -> GraphLocked | None:
    row = sql.fetch_one(sql.statement(sql.GRAPH_LOCK), [graph_run_id])
    if row is None:  # the graph was deleted
        return None
    state, has, values, generation, started_at = row
    return GraphLocked(
        graph_run_id, state, sql.loads(has), sql.loads(values), generation, started_at
    )


def _settle(read: RunRead, task_run_id: int, job_id: int, outcome: Outcome | None) -> dict:
    """Record the outcome of the run with the graph locked, as the graph's state now is.
    A success of a running graph takes the hand-written path; the rest the ORM's."""
    graph = _lock(read.graph_id)
    rows = task_rows(read.graph_id)
    mine = rows.get(read.task)
    if graph is None or mine is None or mine.job_id != job_id or mine.state != TaskState.READY:
        return {"outcome": "stale"}  # a restart made this run obsolete, or the graph is gone
    if outcome is not None and outcome.ok and graph.state == GraphState.RUNNING:
        return _succeed(graph, mine, outcome, rows)
    return _settle_otherwise(locked(graph.id), TaskRun.objects.get(id=task_run_id), outcome, rows)


def _done_order(rows: dict[str, TaskRow]) -> int:
    return 1 + max((row.done_order or 0 for row in rows.values()), default=0)


def _succeed(graph: GraphLocked, mine: TaskRow, outcome: Outcome, rows) -> dict[str, Any]:
    """ready → succeeded, the outputs merged into the graph's values, the dependants
    released (or the graph finished)."""
    sql.execute(
        sql.statement(sql.TASK_SUCCEED),
        [
            sql.dumps(outcome.inputs),
            sql.dumps(outcome.outputs),
            _done_order(rows),
            sql.moment(outcome.started_at),
            sql.moment(outcome.finished_at),
            mine.id,
        ],
    )
    values = {**graph.values, **outcome.outputs}
    sql.execute(sql.statement(sql.GRAPH_VALUES), [sql.dumps(values), graph.id])
    rows[mine.task] = mine._replace(state=TaskState.SUCCEEDED)
    return {"outcome": "succeeded", "released": _release_dependants(graph, mine.task, rows)}


def _settle_otherwise(graph: GraphRun, run: TaskRun, outcome: Outcome | None, rows) -> dict:
    if outcome is None:  # the graph stopped before this task began
        TaskRun.objects.filter(id=run.id).update(state=TaskState.SKIPPED)
        failures.after_settled(graph)
        return {"outcome": "skipped"}
    if graph.state != GraphState.RUNNING:  # the graph stopped while this task ran
        record_outcome(graph, run, outcome, done_order=_done_order(rows))
        failures.after_settled(graph)
        return {"outcome": "succeeded" if outcome.ok else "failed", "late": True}
    return failures.task_failed(graph, run, outcome)


def _release_dependants(graph: GraphLocked, task: str, rows: dict[str, TaskRow]) -> list[str]:
    """Release every task that runs after ``task`` and now has all its predecessors
    succeeded; finish the graph when every task has. The graph is locked."""
    plan = plan_of(graph.id, graph.started_at)
    done = {name for name, row in rows.items() if row.state == TaskState.SUCCEEDED}
    if len(done) == len(rows):
        _finish(locked(graph.id), plan)
        return []
    dependants = [
        rows[name]
        for name in plan.tasks
        if task in plan.steps[name].after
        and rows[name].state == TaskState.WAITING
        and plan.steps[name].after <= done
    ]
    return release(graph, dependants)


def _finish(graph: GraphRun, plan: Plan) -> None:
    """running → succeeded; the result is the value of each wanted proposition."""
    providers = {task for task in plan.goals.values() if task is not None}
    outputs = dict(
        TaskRun.objects.filter(graph_run_id=graph.id, task__in=providers).values_list(
            "task", "result"
        )
    )
    graph.result = {
        goal: graph.has[goal] if task is None else outputs[task][goal]
        for goal, task in plan.goals.items()
    }
    graph.state, graph.finished_at = GraphState.SUCCEEDED, timezone.now()
    graph.save(update_fields=["result", "state", "finished_at"])
    graph_ended(graph)
