"""The jobs API: token auth, roles, idempotent scheduling, field errors, paging."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tasksapp.engine.handlers import ERR_HANDLER_PATH
from tasksapp.engine.models import Job, JobState
from tasksapp.engine.retry import ERR_POLICY_TYPE
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER, api_client_for, make_job

pytestmark = pytest.mark.django_db
JOBS = "/api/jobs/"


def _when(**delta) -> str:
    return (timezone.now() + dt.timedelta(**(delta or {"hours": 1}))).isoformat()


def test_no_token_is_401(db):
    response = APIClient().get(JOBS)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_bad_token_is_401(db):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert client.get(JOBS).status_code == 401


def test_user_without_role_is_403(stranger):
    assert api_client_for(stranger).get(JOBS).status_code == 403


def test_viewer_reads_but_cannot_write(viewer_api):
    job = make_job()
    assert viewer_api.get(JOBS).status_code == 200
    assert viewer_api.get(f"{JOBS}{job.id}/").status_code == 200
    response = viewer_api.post(JOBS, {"handler": HANDLER, "run_at": _when()}, format="json")
    assert response.status_code == 403
    assert viewer_api.post(f"{JOBS}{job.id}/cancel/").status_code == 403
    assert Job.objects.count() == 1


def test_schedule_a_job(operator_api):
    response = operator_api.post(
        JOBS,
        {
            "handler": HANDLER,
            "run_at": _when(),
            "payload": {"n": 1},
            "max_attempts": 3,
            "retry_policy": {"delays": [1, 2]},
            "delivery": "at_least_once",
            "time_limit": 2.5,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    job = Job.objects.get(id=body["id"])
    assert (job.state, job.payload, job.max_attempts) == ("scheduled", {"n": 1}, 3)
    assert body["delivery"] == "at_least_once" and body["time_limit"] == 2.5


def test_schedule_is_idempotent_with_a_key(operator_api):
    data = {"handler": HANDLER, "run_at": _when(), "idempotency_key": "order-42"}
    first = operator_api.post(JOBS, data, format="json")
    again = operator_api.post(JOBS, data, format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = operator_api.post(JOBS, {**data, "payload": {"other": True}}, format="json")
    assert other.status_code == 409 and other.json()["job_id"] == first.json()["id"]
    assert Job.objects.get().payload == {}


@pytest.mark.parametrize(
    ("data", "field", "text"),
    [
        ({"run_at": "soon"}, "run_at", "Datetime has wrong format"),
        ({"handler": "nodots"}, "handler", "handler must be a dotted name"),
        ({"handler": "no.such.module"}, "handler", "is not registered"),
        ({"handler": "tasksapp.engine.options.ERR_KEY"}, "handler", "is not registered"),
        ({"max_attempts": 0}, "max_attempts", "greater than or equal to 1"),
        ({"delivery": "twice"}, "delivery", "is not a valid choice"),
        ({"retry_policy": {"delays": []}}, "retry_policy", "retry_policy.delays must be"),
        ({"retry_policy": "fast"}, "retry_policy", "retry_policy must be an object"),
        ({"payload": {"a": "x\x00y"}}, "payload", "must not contain the NUL character"),
        ({"time_limit": -1}, "time_limit", "greater than or equal to"),
        ({"idempotency_key": ""}, "idempotency_key", "may not be blank"),
        ({"idempotency_key": "k" * 201}, "idempotency_key", "no more than 200"),
    ],
)
def test_bad_input_is_400_with_field_errors(operator_api, data, field, text):
    response = operator_api.post(
        JOBS, {"handler": HANDLER, "run_at": _when(), **data}, format="json"
    )
    assert response.status_code == 400
    errors = response.json()
    assert field in errors, errors
    assert text in " ".join(errors[field])
    assert not Job.objects.exists()


def test_every_bad_job_option_is_a_field_error_with_the_engines_message(operator_api):
    data = {"handler": "nodots", "run_at": _when(), "retry_policy": "fast"}
    response = operator_api.post(JOBS, data, format="json")
    assert response.status_code == 400
    assert response.json() == {"handler": [ERR_HANDLER_PATH], "retry_policy": [ERR_POLICY_TYPE]}
    assert not Job.objects.exists()


def test_missing_fields_and_non_json(operator_api):
    response = operator_api.post(JOBS, {}, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"handler", "run_at"}
    response = operator_api.post(JOBS, "not json", content_type="application/json")
    assert response.status_code == 400
    response = operator_api.post(JOBS, '{"payload": NaN}', content_type="application/json")
    assert response.status_code == 400


def test_get_missing_job_is_404(viewer_api):
    assert viewer_api.get(f"{JOBS}424242/").status_code == 404
    assert viewer_api.get(f"{JOBS}99999999999999999999999/").status_code == 404


def test_cancel_retry_run_now(operator_api, operator):
    job = make_job()
    response = operator_api.post(f"{JOBS}{job.id}/run-now/")
    assert response.status_code == 200
    assert dt.datetime.fromisoformat(response.json()["run_at"]) <= timezone.now()
    response = operator_api.post(f"{JOBS}{job.id}/cancel/")
    assert (response.status_code, response.json()["state"]) == (200, "cancelled")
    later = _when(hours=3)
    response = operator_api.post(f"{JOBS}{job.id}/retry/", {"run_at": later}, format="json")
    assert (response.status_code, response.json()["state"]) == (200, "scheduled")
    assert dt.datetime.fromisoformat(response.json()["run_at"]) == dt.datetime.fromisoformat(later)
    actions = list(OperatorAction.objects.order_by("id").values_list("action", "via", "user"))
    assert actions == [
        ("run_now", "api", operator.id),
        ("cancel", "api", operator.id),
        ("retry", "api", operator.id),
    ]


def test_refused_transitions_are_400_and_missing_jobs_404(operator_api):
    done = make_job(JobState.SUCCEEDED)
    response = operator_api.post(f"{JOBS}{done.id}/cancel/")
    assert response.status_code == 400
    assert "only scheduled, failed, claimed or running jobs can be cancelled" in str(
        response.json()
    )
    running = make_job(JobState.RUNNING)
    assert operator_api.post(f"{JOBS}{running.id}/retry/").status_code == 400
    assert operator_api.post(f"{JOBS}{running.id}/run-now/").status_code == 400
    assert operator_api.post(f"{JOBS}424242/cancel/").status_code == 404
    assert not OperatorAction.objects.exists()


def test_list_filters_and_cursor(viewer_api):
    now = timezone.now()
    jobs = [make_job(run_at=now + dt.timedelta(minutes=i)) for i in range(7)]
    dead = make_job(JobState.DEAD, run_at=now - dt.timedelta(days=1))
    seen, cursor = [], None
    while True:
        query = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        body = viewer_api.get(JOBS, query).json()
        seen += [row["id"] for row in body["results"]]
        cursor = body["next"]
        if not cursor:
            break
    assert seen == [j.id for j in reversed(jobs)] + [dead.id]
    assert [r["id"] for r in viewer_api.get(JOBS, {"state": "dead"}).json()["results"]] == [dead.id]
    window = {
        "run_at_from": now.isoformat(),
        "run_at_to": (now + dt.timedelta(minutes=2)).isoformat(),
    }
    assert len(viewer_api.get(JOBS, window).json()["results"]) == 2


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"state": "sleepy"}, "state"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"cursor": "####"}, "cursor"),
        ({"task": 5}, "task"),
        ({"member": "ghost"}, "member"),
        ({"run_at_from": "2026-01-02T00:00Z", "run_at_to": "2026-01-01T00:00Z"}, "run_at_from"),
    ],
)
def test_list_bad_query_is_400(viewer_api, query, field):
    response = viewer_api.get(JOBS, query)
    assert response.status_code == 400
    assert field in response.json()


def test_session_auth_needs_csrf(operator):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.get(JOBS).status_code == 200
    response = client.post(JOBS, {"handler": HANDLER, "run_at": _when()}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_cancel_of_a_running_job_is_requested_and_audited(operator_api):
    running = make_job(JobState.RUNNING, lease_token=2)
    response = operator_api.post(f"{JOBS}{running.id}/cancel/")
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "running" and body["cancel_requested_at"] is not None
    running.refresh_from_db()
    assert running.cancel_requested_at is not None and running.lease_token == 2
    (action,) = OperatorAction.objects.all()
    assert action.action == "cancel" and action.details["state_after"] == "running"
    assert action.details["cancel_requested_at"] == running.cancel_requested_at.isoformat()
