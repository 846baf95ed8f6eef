"""Cancelling a graph, its on_complete job and graph_job_wait, run in-process against
real PostgreSQL (jobs run one at a time by `drain`, or in a thread where a task must be
running while the graph is cancelled)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from tasksapp.engine.models import Job, JobState
from tasksapp.graphs.models import GraphRun, GraphState, TaskState
from tasksapp.graphs.selectors import GraphWaitTimeout, graph_job_wait
from tasksapp.graphs.services import GraphInputError, common, graph_cancel
from tasksapp.graphs.services.cancel import CANCELLED_ERROR, ERR_CANCEL_STATE
from tests.graphs.conftest import drain, run_job, run_next
from tests.graphs.test_services import job_of, runs, schedule, states
from tests.processes.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

OUTCOME = "tests.handlers.graph_tasks.record_graph_outcome"


def completions(calls, graph: GraphRun) -> list[str]:
    return calls.order(kind="complete", key=str(graph.id))


def child_jobs(graph: GraphRun) -> list[Job]:
    return list(Job.objects.filter(handler=common.TASK_HANDLER, payload__graph_run_id=graph.id))


def test_a_pending_graph_is_cancelled_with_its_parent_job(calls):
    graph = schedule(on_complete=OUTCOME)
    cancelled = graph_cancel(graph_run_id=graph.id)
    assert (cancelled.state, cancelled.error) == (GraphState.CANCELLED, CANCELLED_ERROR)
    assert Job.objects.get(id=graph.job_id).state == JobState.CANCELLED
    drain()  # only the on_complete job is due
    assert completions(calls, graph) == ["cancelled"]
    assert not runs(graph) and calls.order() == []


def test_a_running_graph_skips_what_has_not_started_and_releases_nothing_more(calls):
    graph = schedule(on_complete=OUTCOME)
    run_next()  # the parent job: test.a released
    run_job(job_of(graph, "test.a"))  # b and c released
    graph_cancel(graph_run_id=graph.id)
    graph.refresh_from_db()
    assert graph.state == GraphState.CANCELLED and graph.finished_at is not None
    assert states(graph) == {
        "test.a": TaskState.SUCCEEDED,
        "test.b": TaskState.SKIPPED,
        "test.c": TaskState.SKIPPED,
        "test.d": TaskState.SKIPPED,
    }
    drain()
    assert calls.order() == ["test.a"]
    assert sorted(job.state for job in child_jobs(graph)) == ["cancelled", "cancelled", "succeeded"]
    assert completions(calls, graph) == ["cancelled"]


def test_cancelling_again_changes_nothing_and_an_ended_graph_is_refused(calls):
    graph = schedule()
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED
    with pytest.raises(GraphInputError) as refused:
        graph_cancel(graph_run_id=graph.id)
    assert str(refused.value) == ERR_CANCEL_STATE.format(graph=graph.id, state="succeeded")
    other = schedule()
    first = graph_cancel(graph_run_id=other.id)
    assert graph_cancel(graph_run_id=other.id).cancelled_at == first.cancelled_at


def test_with_rollback_finished_tasks_are_undone_latest_first_then_cancelled(calls):
    graph = schedule(strategy="rollback", on_complete=OUTCOME)
    run_next()
    for task in ("test.a", "test.b", "test.c"):
        run_job(job_of(graph, task))
    graph_cancel(graph_run_id=graph.id)
    graph.refresh_from_db()
    assert graph.state == GraphState.ROLLING_BACK
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.CANCELLED and graph.error == CANCELLED_ERROR
    assert calls.order(kind="rollback") == ["test.c", "test.b", "test.a"]
    assert states(graph)["test.d"] == TaskState.SKIPPED
    assert completions(calls, graph) == ["cancelled"]


def test_a_running_task_gets_the_cancel_signal_and_its_rollback_waits_for_it(calls):
    graph = schedule(has={"until_cancelled": {"test.b": 60}}, strategy="rollback")
    run_next()
    run_job(job_of(graph, "test.a"))
    run_job(job_of(graph, "test.c"))
    errors: list = []

    def run_b():
        try:
            run_job(job_of(graph, "test.b"))
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    b = threading.Thread(target=run_b)
    b.start()
    wait_for(lambda: calls.count("test.b") == 1, timeout=20, message="b running")
    asked = time.monotonic()
    graph_cancel(graph_run_id=graph.id)
    assert Job.objects.get(id=job_of(graph, "test.b")).cancel_requested_at is not None
    drain()  # the rollback job snoozes while b runs
    b.join(timeout=30)
    assert not errors and time.monotonic() - asked < 20
    assert calls.count("test.b", kind="cancelled") >= 1
    assert runs(graph)["test.b"].state == TaskState.FAILED
    assert "JobCancelled" in runs(graph)["test.b"].error
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.CANCELLED
    assert calls.order(kind="rollback") == ["test.c", "test.a"]
    assert Job.objects.filter(handler=common.ROLLBACK_HANDLER).get().attempts == 1


def test_on_complete_receives_the_result_or_the_failure(calls):
    done = schedule(on_complete=OUTCOME)
    failed = schedule(has={"fail": {"test.b": -1}}, on_complete=OUTCOME)
    drain()
    completion = Job.objects.get(idempotency_key=common.completion_key(done.id))
    assert completion.state == JobState.SUCCEEDED and completion.handler == OUTCOME
    assert completion.payload == {
        "graph_run_id": done.id,
        "graph_job_id": done.job_id,
        "state": "succeeded",
        "result": {"d": [20, 200]},
        "error": "",
    }
    other = Job.objects.get(idempotency_key=common.completion_key(failed.id)).payload
    assert other["state"] == "aborted" and "test.b" in other["error"]
    assert completions(calls, done) == ["succeeded"]
    assert completions(calls, failed) == ["aborted"]


def test_on_complete_must_be_a_registered_handler(calls):
    before = GraphRun.objects.count()
    with pytest.raises(GraphInputError, match="on_complete: handler 'no.such' is not registered"):
        schedule(on_complete="no.such")
    assert GraphRun.objects.count() == before


def test_graph_job_wait_returns_the_ended_graph_or_times_out(calls):
    graph = schedule()
    began = time.monotonic()
    with pytest.raises(GraphWaitTimeout) as timed_out:
        graph_job_wait(graph.id, 0.3)
    assert 0.3 <= time.monotonic() - began < 5
    assert timed_out.value.graph.state == GraphState.PENDING
    drain()
    view = graph_job_wait(graph.id, 5)
    assert view.done and view.state == GraphState.SUCCEEDED and view.result == {"d": [20, 200]}
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        graph_job_wait(graph.id, -1)
    with pytest.raises(LookupError):
        graph_job_wait(10**9, 0)


def test_graph_job_wait_wakes_when_the_graph_ends_meanwhile(calls):
    graph = schedule()
    threading.Timer(0.5, lambda: (drain(), connection.close())).start()
    view = graph_job_wait(graph.id, 30)
    assert view.state == GraphState.SUCCEEDED
