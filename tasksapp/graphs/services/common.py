"""What the graph services share: handler paths, message constants, the GraphRun lock,
and releasing a task (its child job and its TaskRun in one step)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from django.db.models import F
from django.utils import timezone

from tasksapp.engine.models import Delivery
from tasksapp.engine.options import JobOptions
from tasksapp.engine.retry import validate_policy
from tasksapp.engine.services import JobInputError, job_schedule
from tasksapp.engine.store import job_store
from tasksapp.engine.store.rows import NewJob
from tasksapp.graphs import sql
from tasksapp.graphs.models import GraphRun, TaskRun, TaskState
from tasksapp.graphs.planner import Plan
from tasksapp.graphs.registry import GraphTaskError, default_registry

START_HANDLER = "tasksapp.graphs.runner.start_graph"
TASK_HANDLER = "tasksapp.graphs.runner.run_task"
ROLLBACK_HANDLER = "tasksapp.graphs.runner.rollback_graph"

# A task's child job: the engine retries it after a lost worker (lease expiry) or an error
# of the runner itself. Its last attempt never calls the task: it records the task as
# failed (ERR_WORKER_LOST), so the strategy decides even when a task keeps killing workers.
TASK_JOB_ATTEMPTS = 5
TASK_JOB_POLICY = validate_policy({"delays": [0.5, 1.0, 2.0, 5.0]})
ROLLBACK_JOB_ATTEMPTS = 3
ROLLBACK_JOB_POLICY = {"delays": [1.0, 5.0]}
# The on_complete job: a job of its own (transactional), scheduled in the transaction that
# ends the graph, so it exists exactly when the graph has ended.
COMPLETION_JOB_ATTEMPTS = 5
COMPLETION_JOB_POLICY = {"delays": [1.0, 5.0, 30.0, 60.0]}

ERR_TASK_FAILED = "task {task!r} failed: {error}"
ERR_RERUNS_EXHAUSTED = "task {task!r} failed {attempts} times: {error}"
ERR_RESTARTS_EXHAUSTED = "task {task!r} failed after {restarts} restarts of the graph: {error}"
ERR_WORKER_LOST = "its child job was attempted {lost} times without an outcome (last: {last})"
ERR_TASK_TIME_LIMIT = "its run passed the task's time limit: {error}"
ERR_OUTPUT_JSON = "graph task {task!r} returned values that are not JSON-serialisable: {reason}"
ERR_ROLLBACK_FAILED = "rollback of task {task!r} failed: {error}"
ERR_RELEASED_TWICE = "graph {graph}: a task to release is not waiting; nothing is released"
ERR_JOB_EXISTS = "graph {graph}: the child job {key} exists already; nothing is released"
ERR_REPLAN = "the graph tasks changed since the job was planned, and now: {reason}"


class GraphInputError(JobInputError):
    """Bad input to graph_job_schedule (no plan, a bad strategy, ...); nothing was stored.
    ``goals`` and ``missing`` come from the planner's PlanningError when there is no plan."""

    def __init__(self, message: str, *, goals=(), missing=()) -> None:
        super().__init__(message)
        self.goals = frozenset(goals)
        self.missing = frozenset(missing)


@dataclass
class Outcome:
    """One run of a task: its outputs, or its error (and, for the rerun strategy, when
    it is retried and what its rescue hook replaced in the inputs)."""

    inputs: dict[str, Any] | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    outputs: dict[str, Any] | None = None
    error: str = ""
    retry_in: float | None = None
    rescued: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outputs is not None


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def locked(graph_run_id: int) -> GraphRun:
    """The GraphRun row, locked until the transaction ends: every write of a graph's
    TaskRuns and of its own state happens under this lock, so completions of one graph
    are serialised and a dependant is released exactly once. Its plan is not loaded
    (see plan_of)."""
    return GraphRun.objects.select_for_update().defer("plan").get(id=graph_run_id)


@lru_cache(maxsize=512)
def _plan(graph_run_id: int, started_at: dt.datetime) -> Plan:
    return Plan.from_dict(GraphRun.objects.values_list("plan", flat=True).get(id=graph_run_id))


def plan_of(graph_run_id: int, started_at: dt.datetime) -> Plan:
    """The plan of a started graph, cached per process by (id, start): it never changes
    once the graph has started (a restart runs the same plan again)."""
    return _plan(graph_run_id, started_at)


class TaskRow(NamedTuple):
    id: int
    task: str
    state: str
    job_id: int | None
    done_order: int | None
    attempts: int


def task_rows(graph_run_id: int) -> dict[str, TaskRow]:
    """The state of every task of the graph, by name, in one statement."""
    rows = sql.fetch_all(sql.statement(sql.TASK_ROWS), [graph_run_id])
    return {row[1]: TaskRow(*row) for row in rows}


def error_entry(graph: GraphRun, attempt: int, error: str) -> dict[str, Any]:
    return {
        "generation": graph.generation,
        "attempt": attempt,
        "error": error,
        "at": timezone.now().isoformat(),
    }


def task_job_key(graph, run) -> str:
    return f"graph:{graph.id}:task:{run.id}:g{graph.generation}:a{run.attempts + 1}"


def task_jobs_create(graph, runs: Sequence, *, run_at: dt.datetime) -> list[int]:
    """The child job of the next run (attempt ``attempts + 1``) of each of ``runs``
    (anything with ``id``, ``task`` and ``attempts``), in one insert of the engine's job
    store; their ids, in order. The key is unique per graph, task, generation and
    attempt: a second release of the same run raises (failing the transaction) instead
    of creating a second job."""
    jobs = [_task_job(graph, run, run_at) for run in runs]
    ids = {row.idempotency_key: row.id for row in job_store().insert_jobs(jobs)}
    if len(ids) < len(jobs):
        taken = next(job.idempotency_key for job in jobs if job.idempotency_key not in ids)
        raise RuntimeError(ERR_JOB_EXISTS.format(graph=graph.id, key=taken))
    return [ids[job.idempotency_key] for job in jobs]


def _task_options(task: str) -> JobOptions | None:
    """The task's own options, if it declares any."""
    try:
        return default_registry.get(task).options
    except GraphTaskError:  # no longer registered: its run records that
        return None


def _task_job(graph, run, run_at: dt.datetime) -> NewJob:
    """The child job of a task: retried by the graph's rules, routed and limited in time by
    the task's own options (its queue, priority and concurrency key, its time limit)."""
    options = _task_options(run.task)
    routing = (
        {}
        if options is None
        else {
            "queue": options.queue,
            "priority": options.priority,
            "concurrency_key": options.concurrency_key,
        }
    )
    return NewJob(
        handler=TASK_HANDLER,
        run_at=run_at,
        payload={"graph_run_id": graph.id, "task_run_id": run.id, "task": run.task},
        max_attempts=TASK_JOB_ATTEMPTS,
        retry_policy=TASK_JOB_POLICY,
        delivery=Delivery.TRANSACTIONAL,
        time_limit=None if options is None else options.time_limit,
        idempotency_key=task_job_key(graph, run),
        **routing,
    )


def release(graph, runs: Sequence) -> list[str]:
    """waiting → ready, each with its child job due now (``graph``: anything with ``id``
    and ``generation``; ``runs``: TaskRuns or TaskRows). Call with the graph locked: a
    run read as waiting under the lock is still waiting, so the guard never fails (if it
    did, the whole transaction would roll back)."""
    if not runs:
        return []
    now = timezone.now()
    jobs = task_jobs_create(graph, runs, run_at=now)
    cases = " ".join(["WHEN %s THEN %s"] * len(runs))
    params: list[Any] = [sql.moment(now)]
    for run, job_id in zip(runs, jobs, strict=True):
        params += [run.id, job_id]
    params += [run.id for run in runs]
    update = sql.statement(sql.TASKS_RELEASE, cases=cases, ids=sql.placeholders(len(runs)))
    if sql.execute(update, params) != len(runs):
        raise RuntimeError(ERR_RELEASED_TWICE.format(graph=graph.id))
    return [run.task for run in runs]


def record_outcome(
    graph: GraphRun, run: TaskRun, outcome: Outcome, *, done_order: int | None = None
) -> bool:
    """ready → succeeded (``done_order``: its place in completion order) or → failed,
    with the run's data. Call with the graph locked. False if the run was not ready."""
    fields: dict[str, Any] = {
        "attempts": F("attempts") + 1,
        "inputs": outcome.inputs,
        "started_at": outcome.started_at,
        "finished_at": outcome.finished_at,
    }
    if outcome.ok:
        fields.update(
            state=TaskState.SUCCEEDED, result=outcome.outputs, error="", done_order=done_order
        )
    else:
        entry = error_entry(graph, run.attempts + 1, outcome.error)
        fields.update(state=TaskState.FAILED, error=outcome.error, errors=[*run.errors, entry])
    return bool(TaskRun.objects.filter(id=run.id, state=TaskState.READY).update(**fields))


def completion_key(graph_run_id: int) -> str:
    return f"graph:{graph_run_id}:complete"


def graph_ended(graph) -> None:
    """The graph has just reached a final state (its row locked, in the transaction that
    ends it): schedule its ``on_complete`` job, with the goal results or the failure.
    A result too large for a payload is left out (``result_omitted``): the handler reads
    it from the graph (``graph_run_get``)."""
    if not graph.on_complete:
        return
    payload = {
        "graph_run_id": graph.id,
        "graph_job_id": graph.job_id,
        "state": graph.state,
        "result": graph.result,
        "error": graph.error,
    }
    options = {
        "handler": graph.on_complete,
        "run_at": timezone.now(),
        "idempotency_key": completion_key(graph.id),
        "max_attempts": COMPLETION_JOB_ATTEMPTS,
        "retry_policy": COMPLETION_JOB_POLICY,
        "delivery": Delivery.TRANSACTIONAL,
    }
    try:
        job_schedule(payload=payload, **options)
    except JobInputError:  # validated before anything is stored: the payload was too large
        job_schedule(payload={**payload, "result": None, "result_omitted": True}, **options)
