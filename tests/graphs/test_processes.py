"""Graph jobs on real dispatcher and Celery worker processes: parallel tasks overlap in
time, every strategy behaves as specified, and a worker killed mid-graph costs one re-run
of the task it was running and none of a completed task (executions are counted in
test_graph_calls, written outside the tasks' transactions)."""

from __future__ import annotations

import signal
import uuid

import pytest

from tasksapp.engine.models import Dispatcher, Job, WorkerProcess
from tasksapp.graphs.models import GRAPH_FINAL_STATES, GraphRun, GraphState, TaskRun, TaskState
from tasksapp.graphs.services import graph_job_schedule
from tests.processes.support import wait_for

pytestmark = pytest.mark.processes


def start(cluster, *, workers: int = 2, concurrency: int = 4) -> None:
    cluster.dispatcher("d1")
    for n in range(workers):
        cluster.worker(f"w{n + 1}", concurrency=concurrency)

    def ready() -> bool:
        owned = Dispatcher.objects.exclude(partitions=[]).exists()
        return owned and WorkerProcess.objects.count() >= workers

    wait_for(ready, timeout=60, message="dispatcher and workers ready")


def finished(*graphs: GraphRun, timeout: float = 60) -> list[GraphRun]:
    ids = [graph.id for graph in graphs]

    def done():
        rows = GraphRun.objects.filter(id__in=ids, state__in=GRAPH_FINAL_STATES)
        return rows.count() == len(ids)

    wait_for(done, timeout=timeout, message=f"graphs {ids} finished")
    return [GraphRun.objects.get(id=graph_id) for graph_id in ids]


def runs(graph: GraphRun) -> dict[str, TaskRun]:
    return {run.task: run for run in TaskRun.objects.filter(graph_run=graph)}


def key() -> str:
    return uuid.uuid4().hex[:8]


def overlap(first: TaskRun, second: TaskRun) -> bool:
    return first.started_at < second.finished_at and second.started_at < first.finished_at


def test_tasks_without_dependencies_between_them_run_at_the_same_time(graph_cluster, calls):
    start(graph_cluster)
    graph = graph_job_schedule(
        has={"seed": 1, "key": key(), "sleep": {"test.b": 1.0, "test.c": 1.0}}, wants=["d"]
    )
    demo = graph_job_schedule(
        has={"user_id": 7, "latency_scale": 0.3, "failure_rate": 0}, wants=["friends"]
    )
    graph, demo = finished(graph, demo)
    assert graph.state == demo.state == GraphState.SUCCEEDED
    tasks = runs(graph)
    assert overlap(tasks["test.b"], tasks["test.c"])
    assert tasks["test.d"].started_at >= tasks["test.b"].finished_at
    fetchers = [run for name, run in runs(demo).items() if ".fetch_" in name]
    assert len(fetchers) == 4
    assert max(r.started_at for r in fetchers) < min(r.finished_at for r in fetchers)


def test_each_strategy_with_real_workers(graph_cluster, calls):
    start(graph_cluster)
    keys = {name: key() for name in ("abort", "rerun", "restart", "rollback")}
    abort = graph_job_schedule(
        has={"seed": 1, "key": keys["abort"], "fail": {"test.b": -1}}, wants=["d"]
    )
    rerun = graph_job_schedule(
        has={"token": "stale", "key": keys["rerun"]},
        wants=["data"],
        strategy="rerun",
        task_retry_policy={"delays": [0.1]},
    )
    restart = graph_job_schedule(
        has={"seed": 1, "key": keys["restart"], "fail": {"test.d": 1}},
        wants=["d"],
        strategy="restart",
    )
    rollback = graph_job_schedule(
        has={"seed": 1, "key": keys["rollback"], "fail": {"test.d": -1}},
        wants=["d"],
        strategy="rollback",
    )
    abort, rerun, restart, rollback = finished(abort, rerun, restart, rollback)

    assert abort.state == GraphState.ABORTED
    assert runs(abort)["test.b"].state == TaskState.FAILED
    assert runs(abort)["test.d"].state == TaskState.SKIPPED
    assert calls.count("test.b", key=keys["abort"]) == 1

    assert rerun.state == GraphState.SUCCEEDED and rerun.result == {"data": "fetched"}
    assert runs(rerun)["test.fetch"].attempts == 2
    assert calls.count("test.fetch", kind="rescue", key=keys["rerun"]) == 1

    assert restart.state == GraphState.SUCCEEDED and restart.restarts == 1
    assert calls.count("test.a", key=keys["restart"]) == 2

    assert rollback.state == GraphState.ROLLED_BACK
    tasks = runs(rollback)
    completed = sorted(("test.a", "test.b", "test.c"), key=lambda t: tasks[t].done_order)
    assert calls.order(kind="rollback", key=keys["rollback"]) == completed[::-1]
    assert completed[0] == "test.a"
    assert {tasks[t].state for t in completed} == {TaskState.ROLLED_BACK}


def test_a_worker_killed_mid_graph_reruns_only_the_task_it_was_running(graph_cluster, calls):
    start(graph_cluster)
    run_key = key()
    graph = graph_job_schedule(
        has={"seed": 1, "key": run_key, "sleep": {"test.b": 4.0}}, wants=["d", "e"]
    )

    def b_running_and_c_done():
        tasks = runs(graph)
        done = tasks and tasks["test.c"].state == TaskState.SUCCEEDED
        return done and calls.count("test.b") == 1

    wait_for(b_running_and_c_done, timeout=30, message="b running, a and c done")
    pid = calls.pid_of("test.b")
    victim = next(n for n, p in graph_cluster.processes.items() if p.pid == pid)
    graph_cluster.kill(victim, signal.SIGKILL)

    (graph,) = finished(graph, timeout=60)
    assert graph.state == GraphState.SUCCEEDED and graph.result == {"d": [20, 200], "e": 21}
    executions = {t: calls.count(t) for t in ("test.a", "test.b", "test.c", "test.d", "test.e")}
    assert executions == {"test.a": 1, "test.b": 2, "test.c": 1, "test.d": 1, "test.e": 1}
    tasks = runs(graph)
    assert {t: r.attempts for t, r in tasks.items()} == dict.fromkeys(executions, 1)
    b_job = Job.objects.get(id=tasks["test.b"].job_id)
    # A task's job is transactional: the lost run committed nothing and was not counted.
    assert b_job.attempts == 1 and [e["kind"] for e in b_job.errors] == ["lost_run"]
