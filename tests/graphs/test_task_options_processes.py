"""A graph task's own time limit on a real prefork worker: the hung run is ended at the
limit (its child process too), the task is recorded failed without being called again,
and only then the graph's strategy applies."""

from __future__ import annotations

import time
import uuid

import pytest

from tasksapp.engine.models import Dispatcher, Job, WorkerProcess
from tasksapp.graphs.models import GraphState, TaskRun
from tasksapp.graphs.services import graph_job_schedule
from tests.graphs.test_processes import finished
from tests.processes.support import wait_for

pytestmark = pytest.mark.processes


def test_a_task_past_its_time_limit_is_ended_and_the_strategy_applies(graph_cluster, calls):
    graph_cluster.dispatcher("d1")
    graph_cluster.worker("w1", concurrency=2, pool="prefork")
    wait_for(
        lambda: Dispatcher.objects.exclude(partitions=[]).exists()
        and WorkerProcess.objects.exists(),
        timeout=60,
        message="dispatcher and worker ready",
    )
    key = uuid.uuid4().hex[:8]
    began = time.monotonic()
    graph = graph_job_schedule(
        has={"seed": 1, "key": key, "sleep": {"test.limited": 600}},
        wants=["limited"],
        strategy="abort",
    )
    (graph,) = finished(graph, timeout=60)
    took = time.monotonic() - began
    assert graph.state == GraphState.ABORTED
    assert "its run passed the task's time limit: time limit of 0.5 s exceeded" in graph.error
    assert "its worker process was ended" in graph.error
    assert calls.count("test.limited", key=key) == 1
    run = TaskRun.objects.get(graph_run=graph, task="test.limited")
    assert Job.objects.get(id=run.job_id).attempts == 2
    assert took < 30, took  # not the 600 s the task would have slept
    print(f"aborted {took:.1f} s after scheduling")
