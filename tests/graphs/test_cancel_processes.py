"""Cancelling graphs on real dispatcher and Celery worker processes: running tasks get
the cancel signal, finished ones are rolled back, and a cancel racing a task's finish
has exactly one outcome, with nothing released after the cancel."""

from __future__ import annotations

import time
import uuid

import pytest

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.models.jobs import FINAL_STATES
from tasksapp.graphs.models import GraphRun, GraphState, TaskRun, TaskState
from tasksapp.graphs.services import GraphInputError, common, graph_cancel, graph_job_schedule
from tests.graphs.test_processes import finished, runs, start
from tests.processes.support import wait_for

pytestmark = pytest.mark.processes

OUTCOME = "tests.handlers.graph_tasks.record_graph_outcome"
# From the cancel to the graph's end: the workers' next lease renewal (≤ 1 s), the
# tasks' next check, the rollback job's claim and hooks; room for a busy machine.
CANCEL_BOUND_S = 15.0


def key() -> str:
    return uuid.uuid4().hex[:8]


def child_jobs(graph: GraphRun) -> list[Job]:
    return list(Job.objects.filter(handler=common.TASK_HANDLER, payload__graph_run_id=graph.id))


def test_running_tasks_stop_and_finished_ones_are_rolled_back(graph_cluster, calls):
    start(graph_cluster)
    k = key()
    graph = graph_job_schedule(
        has={"seed": 1, "key": k, "until_cancelled": {"test.b": 60, "test.c": 60}},
        wants=["d"],
        strategy="rollback",
        on_complete=OUTCOME,
    )
    wait_for(
        lambda: calls.count("test.b", key=k) and calls.count("test.c", key=k),
        timeout=60,
        message="b and c running",
    )
    asked = time.monotonic()
    graph_cancel(graph_run_id=graph.id)
    (graph,) = finished(graph, timeout=CANCEL_BOUND_S)
    took = time.monotonic() - asked
    assert graph.state == GraphState.CANCELLED, graph.error
    assert calls.count("test.b", kind="cancelled", key=k) >= 1
    assert calls.count("test.c", kind="cancelled", key=k) >= 1
    assert calls.order(kind="rollback", key=k) == ["test.a"]
    assert calls.count("test.d", key=k) == 0
    tasks = runs(graph)
    assert tasks["test.a"].state == TaskState.ROLLED_BACK
    assert tasks["test.b"].state == tasks["test.c"].state == TaskState.FAILED
    assert tasks["test.d"].state == TaskState.SKIPPED
    wait_for(lambda: calls.order(kind="complete", key=str(graph.id)), timeout=20, message="done")
    assert calls.order(kind="complete", key=str(graph.id)) == ["cancelled"]
    print(f"graph cancelled and rolled back {took:.2f} s after the cancel")


@pytest.mark.parametrize("delay", [0.2, 0.35, 0.5, 0.65, 0.8])
def test_a_cancel_racing_a_task_finish_has_one_outcome(graph_cluster, calls, delay):
    """test.a sleeps 0.5 s after its call is logged, then releases b and c: cancelled
    `delay` s after that log, the cancel lands just before or just after a's finish."""
    start(graph_cluster)
    k = key()
    graph = graph_job_schedule(
        has={"seed": 1, "key": k, "sleep": {"test.a": 0.5}}, wants=["d"], on_complete=OUTCOME
    )
    wait_for(lambda: calls.count("test.a", key=k), timeout=60, message="a running", interval=0.01)
    time.sleep(delay)
    try:
        graph_cancel(graph_run_id=graph.id)
        refused = False
    except GraphInputError:
        refused = True
    (graph,) = finished(graph, timeout=60)
    wait_for(
        lambda: all(job.state in FINAL_STATES for job in child_jobs(graph)),
        timeout=30,
        message="every child job ended",
    )
    wait_for(lambda: calls.order(kind="complete", key=str(graph.id)), timeout=20, message="done")
    # exactly one outcome, and the completion job saw that one
    assert graph.state == (GraphState.SUCCEEDED if refused else GraphState.CANCELLED)
    assert calls.order(kind="complete", key=str(graph.id)) == [graph.state]
    tasks = TaskRun.objects.filter(graph_run=graph)
    assert not tasks.filter(state__in=[TaskState.WAITING, TaskState.READY]).exists()
    if not refused:
        assert graph.result is None
        # nothing released after the cancel (both happen with the graph row locked)
        released = [run.released_at for run in tasks if run.released_at is not None]
        assert all(when <= graph.cancelled_at for when in released), (released, graph)
        ran_after = [j for j in child_jobs(graph) if j.state == JobState.SUCCEEDED]
        # d may already have been released (and be running) when the cancel landed: it
        # then runs once, and its result is not the graph's
        d_runs = calls.count("test.d", key=k)
        assert d_runs <= 1
        if d_runs:
            assert tasks.get(task="test.d").released_at <= graph.cancelled_at
        print(
            f"delay {delay}: cancelled; {len(released)} released, {len(ran_after)} child jobs"
            f" succeeded, d ran {d_runs}×; a {tasks.get(task='test.a').state}"
        )
    else:
        assert graph.result == {"d": [20, 200]}
        print(f"delay {delay}: the graph had succeeded; the cancel was refused")
