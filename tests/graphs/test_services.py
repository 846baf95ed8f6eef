"""Graph jobs run in-process against real PostgreSQL: scheduling, execution, the four
failure strategies, release-once under concurrent completions, and the graph view.

Jobs are claimed and run one at a time in (run_at, id) order (`drain`), so the order of
tasks is deterministic. The test tasks are in tests/handlers/graph_tasks.py."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.services import IdempotencyConflict
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.graphs.models import GraphRun, GraphState, TaskRun, TaskState
from tasksapp.graphs.planner import ERR_CANNOT_PRODUCE, ERR_NO_PROVIDER, graph_plan
from tasksapp.graphs.selectors import graph_run_get, graph_run_id_for_job, graph_run_page
from tasksapp.graphs.services import GraphInputError, common, graph_job_schedule
from tasksapp.graphs.services.schedule import ERR_HAS, ERR_STRATEGY
from tests.graphs.conftest import drain, run_job, run_next
from tests.handlers import graph_tasks
from tests.processes.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

NOW = {"delays": [0]}


def schedule(wants=("d",), *, has=None, **options) -> GraphRun:
    key = uuid.uuid4().hex[:8]
    return graph_job_schedule(has={"seed": 1, "key": key, **(has or {})}, wants=wants, **options)


def runs(graph: GraphRun) -> dict[str, TaskRun]:
    return {run.task: run for run in TaskRun.objects.filter(graph_run=graph)}


def states(graph: GraphRun) -> dict[str, str]:
    return {task: run.state for task, run in runs(graph).items()}


def job_of(graph: GraphRun, task: str) -> int:
    return runs(graph)[task].job_id


# --- scheduling -----------------------------------------------------------------------


def test_no_plan_is_an_error_that_names_what_cannot_be_produced_and_stores_nothing(calls):
    with pytest.raises(GraphInputError) as raised:
        graph_job_schedule(has={"key": "x"}, wants=["d"])
    reason = ERR_NO_PROVIDER.format(prop="seed")
    assert str(raised.value) == ERR_CANNOT_PRODUCE.format(goal="d", reasons=reason)
    assert raised.value.goals == {"d"} and raised.value.missing == {"seed"}
    assert Job.objects.count() == 0 and GraphRun.objects.count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"has": ["seed"], "wants": ["d"]}, ERR_HAS),
        (
            {"has": {"seed": 1}, "wants": ["d"], "strategy": "retry"},
            ERR_STRATEGY.format(choices="abort, rerun, restart, rollback"),
        ),
    ],
)
def test_bad_input_stores_nothing(calls, options, message):
    with pytest.raises(GraphInputError) as raised:
        graph_job_schedule(**options)
    assert str(raised.value) == message
    assert Job.objects.count() == 0 and GraphRun.objects.count() == 0


def test_scheduling_stores_the_job_with_its_plan_and_no_task_yet(calls):
    graph = schedule()
    assert graph.state == GraphState.PENDING and graph.strategy == "abort"
    assert graph.plan == graph_plan(has=graph.has, wants=["d"]).as_dict()
    assert graph.job.handler == common.START_HANDLER and graph.job.state == JobState.SCHEDULED
    assert TaskRun.objects.count() == 0
    again = graph_job_schedule(has={"seed": 5}, wants=["d"], idempotency_key="same")
    assert graph_job_schedule(has={"seed": 5}, wants=["d"], idempotency_key="same") == again
    with pytest.raises(IdempotencyConflict):
        graph_job_schedule(has={"seed": 6}, wants=["d"], idempotency_key="same")


# --- execution ------------------------------------------------------------------------


def test_a_graph_runs_each_task_once_and_its_goals_are_the_result(calls):
    graph = schedule()
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED
    assert graph.result == {"d": [20, 200]}
    assert {"a": 2, "b": 20, "c": 200, "d": [20, 200]}.items() <= graph.values.items()
    tasks = runs(graph)
    assert set(tasks) == {"test.a", "test.b", "test.c", "test.d"}
    assert all(run.state == TaskState.SUCCEEDED and run.attempts == 1 for run in tasks.values())
    assert tasks["test.d"].inputs == {"b": 20, "c": 200, "key": graph.has["key"]}
    assert [calls.count(task) for task in tasks] == [1, 1, 1, 1]
    d = tasks["test.d"]
    assert d.started_at >= max(tasks["test.b"].finished_at, tasks["test.c"].finished_at)
    parent = Job.objects.get(id=graph.job_id)  # succeeded once the graph had started
    assert parent.state == JobState.SUCCEEDED
    assert parent.result == {"graph_run_id": graph.id, "tasks": 4, "started": ["test.a"]}


def test_a_task_starts_when_its_own_inputs_exist_not_when_its_layer_is_done(calls):
    graph = schedule(wants=["d", "e"])
    run_next()  # the parent job
    run_job(job_of(graph, "test.a"))
    run_job(job_of(graph, "test.b"))
    now = states(graph)
    assert now["test.c"] == TaskState.READY  # layer 1 is not done ...
    assert now["test.e"] == TaskState.READY  # ... yet e, which needs only b, is released
    assert now["test.d"] == TaskState.WAITING
    assert Job.objects.get(id=job_of(graph, "test.e")).state == JobState.SCHEDULED


def test_the_demo_friends_job(calls):
    graph = graph_job_schedule(
        has={"user_id": 42, "latency_scale": 0, "failure_rate": 0}, wants=["friends"]
    )
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED
    assert len(runs(graph)) == 6 and graph.result["friends"][0].keys() == {"id", "networks"}


def test_changed_tasks_are_planned_again_when_the_graph_starts(calls):
    graph = schedule()
    GraphRun.objects.filter(id=graph.id).update(plan={**graph.plan, "fingerprint": "old"})
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED and graph.plan["fingerprint"] != "old"


def test_a_graph_with_nothing_to_do_succeeds_at_once(calls):
    graph = graph_job_schedule(has={"d": 7}, wants=["d"])
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED and graph.result == {"d": 7}


# --- failure strategies ---------------------------------------------------------------


def test_abort_stops_the_graph_and_skips_the_rest(calls):
    graph = schedule(has={"fail": {"test.b": -1}}, strategy="abort")
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.ABORTED and graph.finished_at is not None
    error = "TaskBroke: test.b run 1 fails"
    assert graph.error == common.ERR_TASK_FAILED.format(task="test.b", error=error)
    assert states(graph) == {
        "test.a": TaskState.SUCCEEDED,
        "test.b": TaskState.FAILED,
        "test.c": TaskState.SKIPPED,  # released with b, cancelled before it started
        "test.d": TaskState.SKIPPED,
    }
    assert calls.count("test.b") == 1 and calls.count("test.c") == 0
    c_job = Job.objects.get(id=job_of(graph, "test.c"))
    assert c_job.state == JobState.CANCELLED
    b_job = Job.objects.get(id=job_of(graph, "test.b"))
    assert b_job.state == JobState.SUCCEEDED and b_job.result["graph"] == GraphState.ABORTED


def test_rerun_calls_rescue_and_retries_only_the_failed_task(calls):
    graph = graph_job_schedule(
        has={"token": "stale", "key": "r"},
        wants=["data"],
        strategy="rerun",
        task_retry_policy=NOW,
    )
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED and graph.result == {"data": "fetched"}
    fetch = runs(graph)["test.fetch"]
    assert fetch.attempts == 2 and fetch.rescued == {"token": "fresh"}
    assert fetch.inputs["token"] == "fresh"
    assert [e["error"] for e in fetch.errors] == ["InvalidToken: token 'stale' expired"]
    assert calls.order(kind="run") == ["test.fetch", "test.fetch"]
    assert calls.count("test.fetch", kind="rescue") == 1


def test_rerun_waits_for_the_retry_policy(calls):
    graph = schedule(
        has={"fail": {"test.a": 1}}, strategy="rerun", task_retry_policy={"delays": [30]}
    )
    drain()
    a = runs(graph)["test.a"]
    assert a.state == TaskState.READY and a.attempts == 1 and calls.count("test.a") == 1
    retry = Job.objects.get(id=a.job_id)
    assert retry.state == JobState.SCHEDULED
    assert 29 < (retry.run_at - a.finished_at).total_seconds() < 31


def test_rerun_gives_up_after_max_task_attempts_then_aborts(calls):
    graph = schedule(
        has={"fail": {"test.b": -1}}, strategy="rerun", max_task_attempts=3, task_retry_policy=NOW
    )
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.ABORTED
    error = "TaskBroke: test.b run 3 fails"
    assert graph.error == common.ERR_RERUNS_EXHAUSTED.format(task="test.b", attempts=3, error=error)
    assert calls.count("test.b") == 3 and calls.count("test.a") == 1
    assert calls.count("test.c") == 1  # c ran meanwhile; only b was retried
    assert runs(graph)["test.b"].attempts == 3


def test_restart_runs_the_whole_graph_again(calls):
    graph = schedule(has={"fail": {"test.d": 1}}, strategy="restart", max_restarts=2)
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED and graph.result == {"d": [20, 200]}
    assert graph.restarts == 1 and graph.generation == 1
    assert [calls.count(t) for t in ("test.a", "test.b", "test.c", "test.d")] == [2, 2, 2, 2]
    d = runs(graph)["test.d"]
    assert d.attempts == 1 and [e["generation"] for e in d.errors] == [0]


def test_restart_is_bounded_then_aborts(calls):
    graph = schedule(has={"fail": {"test.b": -1}}, strategy="restart", max_restarts=2)
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.ABORTED and graph.restarts == 2
    error = "TaskBroke: test.b run 3 fails"
    assert graph.error == common.ERR_RESTARTS_EXHAUSTED.format(
        task="test.b", restarts=2, error=error
    )
    assert calls.count("test.a") == 3 and calls.count("test.b") == 3


def test_rollback_undoes_completed_tasks_in_reverse_completion_order(calls):
    graph = schedule(has={"fail": {"test.d": -1}}, strategy="rollback")
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.ROLLED_BACK
    error = "TaskBroke: test.d run 1 fails"
    assert graph.error == common.ERR_TASK_FAILED.format(task="test.d", error=error)
    tasks = runs(graph)
    completed = sorted(("test.a", "test.b", "test.c"), key=lambda t: tasks[t].done_order)
    assert calls.order(kind="rollback") == completed[::-1] == ["test.c", "test.b", "test.a"]
    assert {t: r.state for t, r in tasks.items()} == {
        "test.a": TaskState.ROLLED_BACK,
        "test.b": TaskState.ROLLED_BACK,
        "test.c": TaskState.ROLLED_BACK,
        "test.d": TaskState.FAILED,
    }


def test_rollback_waits_for_a_task_in_flight_which_then_does_not_run(calls):
    graph = schedule(has={"fail": {"test.b": -1}}, strategy="rollback")
    run_next()
    run_job(job_of(graph, "test.a"))
    (claim,) = job_claim_due(ids=[job_of(graph, "test.c")], owner="t", ttl=10, lead=2)
    run_job(job_of(graph, "test.b"))
    graph.refresh_from_db()
    assert graph.state == GraphState.ROLLING_BACK
    assert not Job.objects.filter(handler=common.ROLLBACK_HANDLER).exists()  # c is in flight
    execute_batch([[claim.id, claim.token, claim.run_at_ms]])
    assert calls.count("test.c") == 0
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.ROLLED_BACK
    assert states(graph)["test.c"] == TaskState.SKIPPED
    assert calls.order(kind="rollback") == ["test.a"]


def test_a_task_running_when_the_graph_fails_is_rolled_back_once_it_completes(calls):
    graph = schedule(has={"fail": {"test.b": -1}}, strategy="rollback")
    run_next()
    run_job(job_of(graph, "test.a"))
    gate = threading.Barrier(2)
    graph_tasks.BARRIERS["test.c"] = gate  # c runs until the main thread lets it finish
    errors: list = []
    c_thread = _run_in_thread(job_of(graph, "test.c"), errors)
    wait_for(lambda: calls.count("test.c") == 1, timeout=10, message="c running")
    run_job(job_of(graph, "test.b"))
    assert not Job.objects.filter(handler=common.ROLLBACK_HANDLER).exists()  # c still runs
    gate.wait(timeout=10)
    c_thread.join(timeout=30)
    assert not errors
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.ROLLED_BACK
    assert calls.order(kind="rollback") == ["test.c", "test.a"]  # latest completion first
    assert states(graph)["test.c"] == TaskState.ROLLED_BACK


def test_a_rollback_hook_failing_for_good_fails_the_graph(calls, monkeypatch):
    monkeypatch.setattr("tasksapp.graphs.services.failures.ROLLBACK_JOB_POLICY", NOW)
    graph = schedule(has={"fail": {"test.d": -1, "test.b.rollback": 1}}, strategy="rollback")
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.FAILED
    assert graph.error.endswith(
        common.ERR_ROLLBACK_FAILED.format(task="test.b", error="TaskBroke: test.b cannot be undone")
    )
    assert calls.order(kind="rollback") == ["test.c", "test.b", "test.b", "test.b"]
    assert states(graph)["test.a"] == TaskState.SUCCEEDED  # not undone: rollback stopped


def test_a_task_whose_worker_keeps_getting_lost_counts_as_failed(calls):
    graph = schedule(has={"fail": {}}, strategy="abort")
    run_next()
    a_job = job_of(graph, "test.a")
    lost = "worker lost: lease expired before the job finished"
    Job.objects.filter(id=a_job).update(
        state=JobState.FAILED, attempts=common.TASK_JOB_ATTEMPTS - 1, last_error=lost
    )
    run_job(a_job)
    graph.refresh_from_db()
    assert calls.count("test.a") == 0  # the last attempt does not call the task
    reason = common.ERR_WORKER_LOST.format(lost=common.TASK_JOB_ATTEMPTS - 1, last=lost)
    assert graph.state == GraphState.ABORTED
    assert graph.error == common.ERR_TASK_FAILED.format(task="test.a", error=reason)


def test_a_child_job_of_a_deleted_graph_does_nothing(calls):
    graph = schedule()
    run_next()
    child = job_of(graph, "test.a")
    Job.objects.filter(id=graph.job_id).delete()  # the graph and its TaskRuns go with it
    assert run_job(child).state == JobState.SUCCEEDED
    assert Job.objects.get(id=child).result["outcome"] == "stale"
    assert calls.count("test.a") == 0


# --- release once ---------------------------------------------------------------------


def _run_in_thread(job_id: int, errors: list) -> threading.Thread:
    def target():
        try:
            run_job(job_id)
        except Exception as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    return thread


@pytest.mark.parametrize("round_", range(5))
def test_two_tasks_completing_at_once_release_their_dependant_exactly_once(calls, round_):
    graph = schedule()
    run_next()
    run_job(job_of(graph, "test.a"))
    barrier = threading.Barrier(2)
    graph_tasks.BARRIERS.update({"test.b": barrier, "test.c": barrier})
    errors: list = []
    threads = [_run_in_thread(job_of(graph, t), errors) for t in ("test.b", "test.c")]
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    d = runs(graph)["test.d"]
    children = Job.objects.filter(handler=common.TASK_HANDLER, payload__task_run_id=d.id)
    assert d.state == TaskState.READY and children.count() == 1
    drain()
    assert calls.count("test.d") == 1
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED


# --- selectors ------------------------------------------------------------------------


def test_the_graph_view_shows_layers_states_timings_and_result(calls):
    graph = schedule()
    view = graph_run_get(graph_run_id=graph.id)
    assert [[t.task for t in layer] for layer in view.layers] == [
        ["test.a"],
        ["test.b", "test.c"],
        ["test.d"],
    ]
    assert view.counts == {TaskState.WAITING: 4}
    drain()
    view = graph_run_get(graph_run_id=graph.id)
    assert view.state == GraphState.SUCCEEDED and view.result == {"d": [20, 200]}
    d = view.layers[2][0]
    assert d.after == ("test.b", "test.c") and d.duration_ms >= 0 and d.overhead_ms >= 0
    assert graph_run_id_for_job(job_id=graph.job_id) == graph.id
    assert graph_run_id_for_job(job_id=d.job_id) == graph.id
    assert [g.id for g in graph_run_page(state=GraphState.SUCCEEDED)] == [graph.id]


# --- the demo command -----------------------------------------------------------------


def test_load_graph_demo_schedules_friends_and_suggestions_jobs_once(calls):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("load_graph_demo", count=4, stdout=out)
    call_command("load_graph_demo", count=4, stdout=out)
    graphs = GraphRun.objects.order_by("id")
    assert [(g.wants, g.strategy) for g in graphs] == [
        (["friends"], "rerun"),
        (["suggestions"], "rollback"),
        (["friends"], "rerun"),
        (["suggestions"], "rollback"),
    ]
    assert out.getvalue().splitlines()[1].endswith("0 new, starting over the next 5 s")


@pytest.mark.parametrize(
    ("has", "text"),
    [
        ({"seed": "a\x00b"}, "NUL character"),
        ({"seed": "\ud800"}, "lone surrogate"),
        ({"seed": 2**60}, "has "),
        ({"seed": float("nan")}, "has "),
    ],
    ids=["nul", "surrogate", "huge-int", "nan"],
)
def test_a_has_the_jobs_table_cannot_store_is_refused(has, text):
    with pytest.raises(GraphInputError, match=text):
        graph_job_schedule(has=has, wants=["d"])
    assert not GraphRun.objects.exists()
