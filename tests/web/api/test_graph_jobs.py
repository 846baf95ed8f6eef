"""Graph jobs through the API: scheduling with a plan, idempotency, field errors with the
planner's and the service's exact messages, roles, and the graph in a job's detail."""

from __future__ import annotations

import pytest

from tasksapp.engine.models import Job
from tasksapp.graphs.models import GraphRun, GraphState, TaskRun, TaskState
from tasksapp.graphs.planner import ERR_CANNOT_PRODUCE, ERR_NO_PROVIDER
from tasksapp.graphs.services.schedule import ERR_STRATEGY
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import make_job, run_demo_graph

pytestmark = pytest.mark.django_db
GRAPH_JOBS = "/api/graph-jobs/"
JOBS = "/api/jobs/"
HAS = {"user_id": 7, "latency_scale": 0, "failure_rate": 0}


def _body(**extra) -> dict:
    return {"has": HAS, "wants": ["friends"], **extra}


def test_schedule_a_graph_job(operator_api):
    response = operator_api.post(
        GRAPH_JOBS,
        _body(strategy="rerun", max_task_attempts=2, task_retry_policy={"delays": [1]}),
        format="json",
    )
    assert response.status_code == 201, response.data
    graph = GraphRun.objects.get()
    assert response.data["id"] == graph.job_id
    assert response.data["handler"] == "tasksapp.graphs.runner.start_graph"
    shown = response.data["graph"]
    assert shown["id"] == graph.id and shown["state"] == GraphState.PENDING
    assert shown["strategy"] == "rerun" and shown["max_task_attempts"] == 2
    assert shown["wants"] == ["friends"] and shown["has"] == HAS
    assert [[t["task"] for t in layer] for layer in shown["layers"]] == [
        list(layer) for layer in graph.plan["layers"]
    ]
    assert {t["state"] for layer in shown["layers"] for t in layer} == {TaskState.WAITING}


def test_the_same_idempotency_key_returns_the_stored_graph_job(operator_api):
    first = operator_api.post(GRAPH_JOBS, _body(idempotency_key="g-1"), format="json")
    again = operator_api.post(GRAPH_JOBS, _body(idempotency_key="g-1"), format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.data["id"] == first.data["id"]
    assert GraphRun.objects.count() == 1 and Job.objects.count() == 1


def test_the_same_idempotency_key_with_another_request_is_a_409(operator_api):
    first = operator_api.post(GRAPH_JOBS, _body(idempotency_key="g-1"), format="json")
    again = operator_api.post(
        GRAPH_JOBS, _body(idempotency_key="g-1", strategy="restart"), format="json"
    )
    assert again.status_code == 409
    assert again.json()["job_id"] == first.data["id"]
    assert "strategy" in again.json()["detail"]
    assert GraphRun.objects.get().strategy == "abort" and Job.objects.count() == 1


def test_a_key_of_a_plain_job_is_a_400_on_the_key(operator_api):
    make_job(idempotency_key="plain-1")
    response = operator_api.post(GRAPH_JOBS, _body(idempotency_key="plain-1"), format="json")
    assert response.status_code == 400
    assert list(response.data) == ["idempotency_key"]
    assert GraphRun.objects.count() == 0


def test_no_plan_is_a_400_on_wants_with_the_planners_message(operator_api):
    response = operator_api.post(
        GRAPH_JOBS, {"has": {"nobody": 1}, "wants": ["friends"]}, format="json"
    )
    assert response.status_code == 400
    reason = ERR_NO_PROVIDER.format(prop="user_id")
    assert response.data == {"wants": [ERR_CANNOT_PRODUCE.format(goal="friends", reasons=reason)]}
    assert Job.objects.count() == 0 and GraphRun.objects.count() == 0


def test_an_unknown_strategy_is_a_400_with_the_services_message(operator_api):
    response = operator_api.post(GRAPH_JOBS, _body(strategy="retry"), format="json")
    assert response.status_code == 400
    message = ERR_STRATEGY.format(choices="abort, rerun, restart, rollback")
    assert response.data == {"strategy": [message]}
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"has": ["user_id"], "wants": ["friends"]}, "has"),
        ({"has": HAS, "wants": "friends"}, "wants"),
        ({"has": HAS, "wants": []}, "wants"),
        ({"has": HAS, "wants": [{"a": 1}]}, "wants"),
        ({"wants": ["friends"]}, "has"),
        (_body(max_restarts="many"), "max_restarts"),
        (_body(max_task_attempts=0), "max_task_attempts"),
        (_body(task_retry_policy={"delays": "soon"}), "task_retry_policy"),
        (_body(task_retry_policy=[1]), "task_retry_policy"),
        (_body(run_at="tomorrow"), "run_at"),
        (_body(has={"user_id": "a\x00b"}), "has"),
    ],
)
def test_wrong_types_are_400s_on_the_field(operator_api, body, field):
    response = operator_api.post(GRAPH_JOBS, body, format="json")
    assert response.status_code == 400, response.data
    assert field in response.data
    assert Job.objects.count() == 0


def test_viewer_is_refused(viewer_api):
    response = viewer_api.post(GRAPH_JOBS, _body(), format="json")
    assert response.status_code == 403
    assert Job.objects.count() == 0


def test_plain_job_has_no_graph(viewer_api):
    job = make_job()
    assert viewer_api.get(f"{JOBS}{job.id}/").data["graph"] is None


@pytest.mark.django_db(transaction=True)
def test_a_graph_jobs_detail_has_its_graph_with_states_attempts_timings_results(viewer_api):
    graph = run_demo_graph()
    data = viewer_api.get(f"{JOBS}{graph.job_id}/").data["graph"]
    assert data["state"] == GraphState.SUCCEEDED and data["result"]["friends"]
    tasks = [t for layer in data["layers"] for t in layer]
    assert len(tasks) == TaskRun.objects.filter(graph_run=graph).count()
    for task in tasks:
        assert task["state"] == TaskState.SUCCEEDED and task["attempts"] == 1
        assert task["started_at"] and task["finished_at"] and task["duration_ms"] >= 0
        assert task["result"] and task["error"] == ""
    # A task's own job shows the same graph.
    child = viewer_api.get(f"{JOBS}{tasks[-1]['job_id']}/").data["graph"]
    assert child["id"] == data["id"]


@pytest.mark.django_db(transaction=True)
def test_a_failed_task_shows_its_error(viewer_api):
    graph = run_demo_graph(failure_rate=1.0)
    data = viewer_api.get(f"{JOBS}{graph.job_id}/").data["graph"]
    assert data["state"] == GraphState.ABORTED and "did not answer" in data["error"]
    first = data["layers"][0][0]
    assert first["state"] == TaskState.FAILED and "did not answer" in first["error"]


def test_cancel_a_pending_graph_through_the_api_is_audited(operator_api, viewer_api):
    job_id = operator_api.post(GRAPH_JOBS, _body(), format="json").data["id"]
    assert viewer_api.post(f"{GRAPH_JOBS}{job_id}/cancel/").status_code == 403
    response = operator_api.post(f"{GRAPH_JOBS}{job_id}/cancel/")
    assert response.status_code == 200, response.data
    assert response.data["graph"]["state"] == "cancelled"
    assert response.data["graph"]["done"] is True
    assert response.data["state"] == "cancelled"  # the graph job never started
    graph = GraphRun.objects.get()
    actions = list(
        OperatorAction.objects.order_by("id").values_list("action", "target_type", "target_id")
    )
    assert actions == [
        ("denied:cancel_graph", "job", str(job_id)),
        ("cancel_graph", "graph", str(graph.id)),
    ]
    again = operator_api.post(f"{GRAPH_JOBS}{job_id}/cancel/")
    assert again.status_code == 200  # cancelling again changes nothing


def test_cancel_refusals_are_400_or_404(operator_api):
    plain = make_job()
    assert operator_api.post(f"{GRAPH_JOBS}{plain.id}/cancel/").status_code == 404
    assert operator_api.post(f"{GRAPH_JOBS}424242/cancel/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_finished_graph_cannot_be_cancelled(operator_api):
    graph = run_demo_graph()
    response = operator_api.post(f"{GRAPH_JOBS}{graph.job_id}/cancel/")
    assert response.status_code == 400
    assert "only pending or running graphs can be cancelled" in str(response.data)


def test_schedule_with_an_unknown_on_complete_is_a_field_error(operator_api):
    response = operator_api.post(GRAPH_JOBS, _body(on_complete="no.such"), format="json")
    assert response.status_code == 400
    assert "on_complete" in response.data
    assert not GraphRun.objects.exists()


def test_wait_answers_when_the_timeout_ends_with_done_false(viewer_api, operator_api):
    job_id = operator_api.post(GRAPH_JOBS, _body(), format="json").data["id"]
    response = viewer_api.get(f"{GRAPH_JOBS}{job_id}/wait/", {"timeout": 0.2})
    assert response.status_code == 200
    assert response.data["done"] is False and response.data["graph"]["state"] == "pending"
    assert viewer_api.get(f"{GRAPH_JOBS}{job_id}/wait/", {"timeout": 61}).status_code == 400
    bad = viewer_api.get(f"{GRAPH_JOBS}{job_id}/wait/", {"timeout": "soon"})
    assert bad.status_code == 400 and "timeout" in bad.data


@pytest.mark.django_db(transaction=True)
def test_wait_returns_the_outcome_of_an_ended_graph(viewer_api):
    graph = run_demo_graph()
    response = viewer_api.get(f"{GRAPH_JOBS}{graph.job_id}/wait/", {"timeout": 5})
    assert response.data["done"] is True
    assert response.data["graph"]["state"] == "succeeded"
    assert response.data["graph"]["result"] == graph.result
