"""Queues, priorities and the routing mode through the API: validated fields, audited
operator actions, refusals recorded."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.engine.models import Job, JobQueue, RoutingMode, WorkerProcess
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER, make_job

pytestmark = pytest.mark.django_db


def _job(**fields) -> dict:
    return {"handler": HANDLER, "run_at": (timezone.now() + dt.timedelta(hours=1)).isoformat()} | (
        fields
    )


def test_a_job_takes_its_queue_priority_and_key(operator_api):
    body = _job(queue="billing", priority="critical", concurrency_key="member:7")
    response = operator_api.post("/api/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    answer = response.json()
    assert (answer["queue"], answer["priority"], answer["concurrency_key"]) == (
        "billing",
        9,
        "member:7",
    )
    job = Job.objects.get(id=answer["id"])
    assert (job.queue, job.priority, job.concurrency_key) == ("billing", 9, "member:7")


@pytest.mark.parametrize(
    ("field", "value"),
    [("queue", "Bad Name"), ("queue", "a.b"), ("priority", 10), ("priority", "soon")],
)
def test_a_bad_route_is_a_400_on_its_field_and_stores_nothing(operator_api, field, value):
    response = operator_api.post("/api/jobs/", _job(**{field: value}), format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not Job.objects.exists()


def test_queues_list_shows_an_unserved_queue_first(viewer_api):
    make_job(queue="ghost", run_at=timezone.now() - dt.timedelta(seconds=5))
    make_job(queue="mail", run_at=timezone.now() - dt.timedelta(seconds=5))
    WorkerProcess.objects.create(name="w", hostname="h", pid=1, queues=["default", "mail"])
    rows = viewer_api.get("/api/queues/").json()
    assert rows[0]["name"] == "ghost" and rows[0]["unserved"] and rows[0]["due"] == 1
    mail = next(row for row in rows if row["name"] == "mail")
    assert mail["served"] and not mail["unserved"]


def test_an_operator_pauses_limits_and_resumes_a_queue_recorded(operator_api, operator):
    answer = operator_api.post("/api/queues/billing/pause/").json()
    assert answer["paused"] is True
    patched = operator_api.patch(
        "/api/queues/billing/",
        {"concurrency_limit": 5, "key_concurrency_limit": 1, "rate_limit": 100},
        format="json",
    )
    assert patched.status_code == 200
    assert patched.json()["concurrency_limit"] == 5 and patched.json()["rate_limit"] == 100
    operator_api.patch("/api/queues/billing/", {"rate_limit": None}, format="json")
    assert operator_api.post("/api/queues/billing/resume/").json()["paused"] is False
    queue = JobQueue.objects.get(name="billing")
    assert (queue.paused, queue.concurrency_limit, queue.rate_limit) == (False, 5, None)
    actions = list(OperatorAction.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["queue_pause", "queue_configure", "queue_configure", "queue_resume"]
    first = OperatorAction.objects.order_by("id").first()
    assert (first.user, first.via, first.target_type, first.target_id) == (
        operator,
        "api",
        "queue",
        "billing",
    )
    assert first.details["before"] == {} and first.details["after"]["paused"] is True


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"concurrency_limit": 0}, "concurrency_limit"),
        ({"rate_limit": -3}, "rate_limit"),
        ({"rate_period": 0}, "rate_period"),
        ({"key_concurrency_limit": 10_000_000}, "key_concurrency_limit"),
    ],
)
def test_a_bad_limit_is_a_400_and_changes_nothing(operator_api, body, field):
    response = operator_api.patch("/api/queues/billing/", body, format="json")
    assert response.status_code == 400 and field in response.json()
    assert not JobQueue.objects.exists() and not OperatorAction.objects.exists()


def test_a_bad_queue_name_is_a_400(operator_api):
    response = operator_api.post("/api/queues/Not%20Ok/pause/")
    assert response.status_code == 400 and "queue" in response.json()


def test_a_viewer_may_read_but_not_pause_and_the_refusal_is_recorded(viewer_api):
    assert viewer_api.get("/api/queues/").status_code == 200
    assert viewer_api.post("/api/queues/billing/pause/").status_code == 403
    assert viewer_api.post("/api/routing/degrade/", {"reason": "x"}).status_code == 403
    assert not JobQueue.objects.exists()
    refused = list(OperatorAction.objects.values_list("action", "target_id"))
    assert refused == [("denied:queue_pause", "billing"), ("denied:degrade", "mode")]


def test_degraded_mode_on_and_off_recorded(operator_api):
    answer = operator_api.post(
        "/api/routing/degrade/", {"reason": "Redis failover", "critical_priority": 8}, format="json"
    ).json()
    assert answer["degraded"] and answer["active"] and answer["critical_priority"] == 8
    assert answer["reason"] == "Redis failover"
    off = operator_api.post("/api/routing/restore/").json()
    assert not off["degraded"] and not off["active"]
    mode = RoutingMode.objects.get(id=1)
    assert not mode.degraded
    actions = list(OperatorAction.objects.order_by("id").values_list("action", "details"))
    token = actions[0][1].pop("token")  # the API token it was done with
    assert token == actions[1][1].pop("token") and set(token) == {"id", "prefix"}
    assert actions[0] == ("degrade", {"reason": "Redis failover", "critical_priority": 8})
    assert actions[1] == ("restore", {"reason_before": "Redis failover"})


def test_a_bad_critical_priority_is_a_400(operator_api):
    response = operator_api.post(
        "/api/routing/degrade/", {"reason": "x", "critical_priority": 11}, format="json"
    )
    assert response.status_code == 400 and "critical_priority" in response.json()
    assert not RoutingMode.objects.get(id=1).degraded
