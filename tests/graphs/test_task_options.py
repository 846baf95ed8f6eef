"""A graph task's own job options (max_attempts, retry_policy, time_limit, queue,
priority, concurrency_key, validated as JobOptions): honoured before the graph's failure
strategy applies."""

from __future__ import annotations

import pytest

from tasksapp.engine.models import Job
from tasksapp.graphs.models import GraphState
from tasksapp.graphs.registry import (
    ERR_OPTIONS_KEYS,
    TASK_OPTION_FIELDS,
    GraphTaskError,
    Registry,
    default_registry,
)
from tasksapp.graphs.services import common
from tests.graphs.conftest import drain
from tests.graphs.test_services import runs, schedule

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_is_retried_by_its_own_policy_before_the_strategy(calls):
    graph = schedule(wants=("flaky",), has={"fail": {"test.flaky": 2}}, strategy="abort")
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED, graph.error
    run = runs(graph)["test.flaky"]
    assert run.attempts == 3 and len(run.errors) == 2
    assert calls.count("test.flaky") == 3


def test_out_of_its_own_attempts_the_strategy_applies(calls):
    graph = schedule(wants=("flaky",), has={"fail": {"test.flaky": -1}}, strategy="abort")
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.ABORTED
    assert graph.error == common.ERR_TASK_FAILED.format(
        task="test.flaky", error="TaskBroke: test.flaky run 3 fails"
    )
    assert calls.count("test.flaky") == 3


def test_a_run_past_the_tasks_time_limit_fails_it_and_the_strategy_decides(calls):
    graph = schedule(wants=("limited",), has={"sleep": {"test.limited": 1.0}}, strategy="abort")
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.ABORTED
    assert "its run passed the task's time limit: time limit of 0.5 s exceeded" in graph.error
    run = runs(graph)["test.limited"]
    child = Job.objects.get(id=run.job_id)
    assert child.time_limit == 0.5 and child.attempts == 2
    assert calls.count("test.limited") == 1  # the attempt after the limit does not call it


def test_options_are_checked_as_job_options():
    spec = default_registry.get("test.flaky")
    assert (spec.options.max_attempts, spec.options.retry_policy["delays"]) == (3, [0.0])
    registry = Registry()
    with pytest.raises(GraphTaskError, match="time_limit must be a positive number"):
        registry.task(name="t", requires=[], provides=["p"], options={"time_limit": -1})(dict)
    with pytest.raises(GraphTaskError) as refused:
        registry.task(name="t", requires=[], provides=["p"], options={"delivery": "x"})(dict)
    assert str(refused.value) == ERR_OPTIONS_KEYS.format(
        name="t", allowed=", ".join(TASK_OPTION_FIELDS), given="delivery"
    )
    with pytest.raises(GraphTaskError, match="queue"):
        registry.task(name="t", requires=[], provides=["p"], options={"queue": "no spaces"})(dict)


def test_a_task_job_goes_to_the_tasks_own_queue_priority_and_key(calls):
    graph = schedule(wants=("routed",), strategy="abort")
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED, graph.error
    child = Job.objects.get(id=runs(graph)["test.routed"].job_id)
    assert (child.queue, child.priority, child.concurrency_key) == (
        "reports",
        7,
        "report-builder",
    )
    started = Job.objects.get(id=graph.job_id)  # the graph's own job keeps the default
    assert started.queue == "default"
