"""Reads for task graphs: one graph's view (layers, task states, timings, result), a page
of graph runs, and the graph a job belongs to. Two queries per graph view."""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast

from tasksapp.engine.models import Job, JobState
from tasksapp.graphs.models import GRAPH_FINAL_STATES, GraphRun, TaskRun, TaskState
from tasksapp.graphs.planner import Plan
from tasksapp.graphs.services.common import ROLLBACK_HANDLER, TASK_HANDLER

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
RUNNING = "running"  # shown for a ready task whose child job a worker has started


def _ms(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000


@dataclass(frozen=True)
class TaskView:
    task: str
    layer: int
    after: tuple[str, ...]
    state: str  # a TaskState, or "running" when its child job has started
    attempts: int = 0
    inputs: Any = None
    result: Any = None
    error: str = ""
    errors: tuple = ()
    done_order: int | None = None
    job_id: int | None = None
    job_state: str | None = None
    released_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    inputs_ready_at: dt.datetime | None = None  # when the last task it runs after finished

    @property
    def duration_ms(self) -> float | None:
        return _ms(self.started_at, self.finished_at)

    @property
    def overhead_ms(self) -> float | None:
        """From its last input's completion to its own start (queueing included)."""
        return _ms(self.inputs_ready_at, self.started_at)


@dataclass(frozen=True)
class GraphView:
    id: int
    job_id: int
    state: str
    strategy: str
    has: dict
    wants: list
    result: Any
    error: str
    generation: int
    restarts: int
    max_restarts: int
    max_task_attempts: int
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    goals: dict[str, str | None]
    layers: tuple[tuple[TaskView, ...], ...]
    cancelled_at: dt.datetime | None = None
    on_complete: str = ""

    @property
    def done(self) -> bool:
        return self.state in GRAPH_FINAL_STATES

    @property
    def tasks(self) -> tuple[TaskView, ...]:
        return tuple(view for layer in self.layers for view in layer)

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for view in self.tasks:
            counts[view.state] = counts.get(view.state, 0) + 1
        return counts


def _shown_state(run: TaskRun) -> str:
    if run.state == TaskState.READY and run.job_id and run.job.state == JobState.RUNNING:
        return RUNNING
    return run.state


def _task_view(name: str, plan: Plan, run: TaskRun | None, finished: dict) -> TaskView:
    step = plan.steps[name]
    after = tuple(sorted(step.after))
    if run is None:
        return TaskView(task=name, layer=step.layer, after=after, state=TaskState.WAITING)
    inputs_done = [finished[task] for task in after if finished.get(task)]
    return TaskView(
        task=name,
        layer=step.layer,
        after=after,
        state=_shown_state(run),
        attempts=run.attempts,
        inputs=run.inputs,
        result=run.result,
        error=run.error,
        errors=tuple(run.errors or ()),
        done_order=run.done_order,
        job_id=run.job_id,
        job_state=run.job.state if run.job_id else None,
        released_at=run.released_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        inputs_ready_at=max(inputs_done) if len(inputs_done) == len(after) and after else None,
    )


def graph_view(*, graph: GraphRun) -> GraphView:
    plan = Plan.from_dict(graph.plan)
    runs = {run.task: run for run in TaskRun.objects.filter(graph_run=graph).select_related("job")}
    finished = {task: run.finished_at for task, run in runs.items()}
    layers = tuple(
        tuple(_task_view(name, plan, runs.get(name), finished) for name in layer)
        for layer in plan.layers
    )
    return GraphView(
        id=graph.id,
        job_id=graph.job_id,
        state=graph.state,
        strategy=graph.strategy,
        has=graph.has,
        wants=graph.wants,
        result=graph.result,
        error=graph.error,
        generation=graph.generation,
        restarts=graph.restarts,
        max_restarts=graph.max_restarts,
        max_task_attempts=graph.max_task_attempts,
        created_at=graph.created_at,
        started_at=graph.started_at,
        finished_at=graph.finished_at,
        goals=dict(plan.goals),
        layers=layers,
        cancelled_at=graph.cancelled_at,
        on_complete=graph.on_complete,
    )


def graph_run_get(*, graph_run_id: int) -> GraphView | None:
    """One graph: its layers of tasks with their states and timings, and its result."""
    graph = GraphRun.objects.filter(id=graph_run_id).first()
    return None if graph is None else graph_view(graph=graph)


def graph_run_id_for_job(*, job_id: int) -> int | None:
    """The graph a job belongs to: as its parent job, a task's child job or its rollback
    job; None for any other job."""
    graph_id = GraphRun.objects.filter(job_id=job_id).values_list("id", flat=True).first()
    if graph_id is not None:
        return graph_id
    job = Job.objects.filter(id=job_id).only("handler", "payload").first()
    if job is None or job.handler not in (TASK_HANDLER, ROLLBACK_HANDLER):
        return None
    value = job.payload.get("graph_run_id") if isinstance(job.payload, dict) else None
    return int(value) if value is not None else None


def graph_run_page(
    *,
    state: str | None = None,
    goal: str | None = None,
    before_id: int | None = None,
    limit: int = PAGE_SIZE,
) -> list[GraphRun]:
    """Graph runs, newest first (by id), optionally in one state and wanting ``goal``,
    after ``before_id``. The plan, has and values are not loaded."""
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    runs = GraphRun.objects.defer("plan", "has", "values", "result")
    if state is not None:
        runs = runs.filter(state=state)
    if goal:
        # One of the wanted names, as its JSON text (quoted) in the list: both databases.
        wants_text = Cast("wants", TextField())
        runs = runs.alias(wants_text=wants_text).filter(
            wants_text__contains=json.dumps(goal, ensure_ascii=False)
        )
    if before_id is not None:
        runs = runs.filter(id__lt=before_id)
    return list(runs.order_by("-id")[:limit])


MAX_WAIT_SECONDS = 3600.0
WAIT_POLL_SECONDS = (0.02, 0.05, 0.1, 0.2, 0.5)  # between looks; the last one repeats
ERR_WAIT_TIMEOUT = "timeout must be a number of seconds between 0 and {most:g}."
ERR_WAIT_NOT_FOUND = "graph {graph} does not exist."


class GraphWaitTimeout(TimeoutError):
    """The graph had not ended when the wait ran out; ``graph`` is its view then."""

    def __init__(self, graph: GraphView, timeout: float) -> None:
        super().__init__(f"graph {graph.id} is still {graph.state} after {timeout:g} s")
        self.graph = graph


def graph_job_wait(graph_run_id: int, timeout: float) -> GraphView:
    """Wait until the graph has ended (succeeded, aborted, rolled back, failed or
    cancelled) and return its view; GraphWaitTimeout after ``timeout`` seconds. Looks at
    one indexed column, more slowly the longer it waits (at most every 0.5 s)."""
    timeout = checked_wait_timeout(timeout)
    deadline = time.monotonic() + timeout
    pauses = iter(WAIT_POLL_SECONDS)
    while True:
        state = GraphRun.objects.filter(id=graph_run_id).values_list("state", flat=True).first()
        if state is None:
            raise LookupError(ERR_WAIT_NOT_FOUND.format(graph=graph_run_id))
        left = deadline - time.monotonic()
        if state in GRAPH_FINAL_STATES or left <= 0:
            break
        time.sleep(min(next(pauses, WAIT_POLL_SECONDS[-1]), left))
    view = graph_run_get(graph_run_id=graph_run_id)
    if view is None:
        raise LookupError(ERR_WAIT_NOT_FOUND.format(graph=graph_run_id))
    if not view.done:
        raise GraphWaitTimeout(view, timeout)
    return view


def checked_wait_timeout(timeout: Any, *, most: float = MAX_WAIT_SECONDS) -> float:
    number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
    if not number or not 0 <= timeout <= most:  # NaN fails both comparisons
        raise ValueError(ERR_WAIT_TIMEOUT.format(most=most))
    return float(timeout)
