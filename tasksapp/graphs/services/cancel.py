"""Cancelling a graph job: tasks not started are cancelled, running ones get the
cooperative cancel signal, and the graph ends ``cancelled``; with the rollback strategy,
the rollback hooks of finished tasks run first (latest completion first).

Like every other write of a graph, it happens with the GraphRun row locked: a task that
finishes at the same moment either settles first (and releases its dependants, which
the cancel then cancels) or finds the graph cancelled and releases nothing.
"""

from __future__ import annotations

from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.models import Job, JobState
from tasksapp.engine.services import job_cancel, job_cancel_waiting
from tasksapp.graphs.models import GraphRun, GraphState, Strategy, TaskRun, TaskState

from . import failures
from .common import GraphInputError, graph_ended

ERR_GRAPH_NOT_FOUND = "graph {graph} does not exist."
ERR_CANCEL_STATE = "graph {graph} is {state}: only pending or running graphs can be cancelled."
CANCELLED_ERROR = "cancelled by an operator"


def graph_cancel(*, graph_run_id: int) -> GraphRun:
    """Cancel a pending or running graph (again: nothing changes). Raises GraphInputError
    for a graph that has ended or is rolling back after a failure."""
    with tempo_atomic():
        graph = GraphRun.objects.select_for_update().filter(id=graph_run_id).first()
        if graph is None:
            raise GraphInputError(ERR_GRAPH_NOT_FOUND.format(graph=graph_run_id))
        if graph.cancelled_at is not None:
            return graph
        if graph.state not in (GraphState.PENDING, GraphState.RUNNING):
            raise GraphInputError(ERR_CANCEL_STATE.format(graph=graph.id, state=graph.state))
        graph.cancelled_at = timezone.now()
        if graph.state == GraphState.PENDING:
            # A parent job already started finds the graph cancelled and starts nothing.
            job_cancel_waiting(job_id=graph.job_id)
            _end_cancelled(graph)
            return graph
        running = failures.stop_others(graph)
        _signal_running(graph)
        done = TaskRun.objects.filter(graph_run_id=graph.id, state=TaskState.SUCCEEDED)
        if graph.strategy == Strategy.ROLLBACK and (running or done.exists()):
            graph.state, graph.error = GraphState.ROLLING_BACK, CANCELLED_ERROR
            graph.save(update_fields=["state", "error", "cancelled_at"])
            failures.rollback_schedule(graph)  # it waits for the running tasks to end
        else:
            _end_cancelled(graph)
        return graph


def _end_cancelled(graph: GraphRun) -> None:
    graph.state, graph.error, graph.finished_at = (
        GraphState.CANCELLED,
        CANCELLED_ERROR,
        timezone.now(),
    )
    graph.save(update_fields=["state", "error", "finished_at", "cancelled_at"])
    graph_ended(graph)


def _signal_running(graph: GraphRun) -> None:
    """Ask the running child jobs to stop (tasks see it as task_cancel_requested()). A
    claimed one is left alone: its run finds the graph cancelled and skips the task."""
    ready = TaskRun.objects.filter(graph_run_id=graph.id, state=TaskState.READY)
    running = Job.objects.filter(
        id__in=ready.values("job_id"), state=JobState.RUNNING, cancel_requested_at__isnull=True
    )
    for job_id in running.values_list("id", flat=True):
        job_cancel(job_id=job_id)
