"""Members and recurring tasks through the API."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.recurring.models import Member, RecurringTask
from tasksapp.recurring.services import member_create, recurring_task_create
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER

pytestmark = pytest.mark.django_db


def test_create_get_list_members(operator_api, viewer_api):
    response = operator_api.post("/api/members/", {"external_id": "alice"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["external_id"] == "alice" and body["ordinal"] == 0 and body["active"]
    assert viewer_api.get(f"/api/members/{body['id']}/").json()["external_id"] == "alice"
    for i in range(4):
        member_create(external_id=f"m{i}")
    page = viewer_api.get("/api/members/", {"limit": 3}).json()
    assert len(page["results"]) == 3 and page["next"] == page["results"][-1]["id"]
    rest = viewer_api.get("/api/members/", {"limit": 3, "after": page["next"]}).json()
    assert len(rest["results"]) == 2 and rest["next"] is None
    found = viewer_api.get("/api/members/", {"external_id": "m2"}).json()["results"]
    assert [m["external_id"] for m in found] == ["m2"]


def test_member_errors(operator_api, viewer_api):
    operator_api.post("/api/members/", {"external_id": "alice"}, format="json")
    response = operator_api.post("/api/members/", {"external_id": "alice"}, format="json")
    assert response.status_code == 400
    assert "already exists" in str(response.json())
    assert operator_api.post("/api/members/", {}, format="json").status_code == 400
    response = operator_api.post("/api/members/", {"external_id": "  "}, format="json")
    assert response.status_code == 400
    assert (
        viewer_api.post("/api/members/", {"external_id": "bob"}, format="json").status_code == 403
    )
    assert viewer_api.get("/api/members/999999/").status_code == 404


def test_deactivate_and_activate_member(operator_api, viewer_api):
    member = member_create(external_id="alice")
    assert viewer_api.post(f"/api/members/{member.id}/deactivate/").status_code == 403
    response = operator_api.post(f"/api/members/{member.id}/deactivate/")
    assert response.status_code == 200 and response.json()["active"] is False
    response = operator_api.post(f"/api/members/{member.id}/activate/")
    assert response.json()["active"] is True
    assert list(OperatorAction.objects.order_by("id").values_list("action", "target_id")) == [
        ("denied:deactivate", "alice"),  # the viewer's attempt
        ("deactivate", "alice"),
        ("activate", "alice"),
    ]
    assert operator_api.post("/api/members/999999/deactivate/").status_code == 404


def test_create_and_read_recurring_task(operator_api, viewer_api):
    response = operator_api.post(
        "/api/recurring-tasks/",
        {"name": "sync", "handler": HANDLER, "period_seconds": 86400, "slices": 24},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["period_seconds"] == 86400 and body["slices"] == 24 and body["active"]
    assert viewer_api.get(f"/api/recurring-tasks/{body['id']}/").json()["name"] == "sync"
    assert [t["name"] for t in viewer_api.get("/api/recurring-tasks/").json()] == ["sync"]
    assert body["retention"] == {}


def test_a_recurring_task_keeps_its_own_retention_ages(operator_api):
    data = {"name": "sync", "handler": HANDLER, "period_seconds": 86400}
    response = operator_api.post(
        "/api/recurring-tasks/", {**data, "retention": {"dead": 90, "succeeded": 2}}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["retention"] == {"succeeded": 2.0, "dead": 90.0}


@pytest.mark.parametrize(
    ("data", "field", "text"),
    [
        ({"period_seconds": 30}, "period_seconds", "greater than or equal to 60"),
        ({"slices": 0}, "slices", "greater than or equal to 1"),
        ({"period_seconds": 600, "slices": 20}, "non_field_errors", "a slice must last"),
        ({"payload": [1, 2]}, "payload", "must be a JSON object"),
        (
            {"period_seconds": 60, "retry_policy": {"delays": [100]}, "max_attempts": 2},
            "period_seconds",
            "must exceed the retry policy's worst case",
        ),
        ({"epoch": "2026-01-01T00:00:00"}, None, None),
        ({"retention": {"running": 3}}, "retention", "must map finished states"),
        ({"retention": {"dead": 0}}, "retention", "must map finished states"),
    ],
)
def test_recurring_task_bad_input(operator_api, data, field, text):
    base = {"name": "sync", "handler": HANDLER, "period_seconds": 86400}
    response = operator_api.post("/api/recurring-tasks/", {**base, **data}, format="json")
    if field is None:  # a naive epoch is read as UTC, like every naive time the API gets
        assert response.status_code == 201
        return
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert text in " ".join(response.json()[field])


def test_duplicate_task_name_is_400(operator_api):
    recurring_task_create(name="sync", handler=HANDLER, period=dt.timedelta(days=1))
    response = operator_api.post(
        "/api/recurring-tasks/",
        {"name": "sync", "handler": HANDLER, "period_seconds": 86400},
        format="json",
    )
    assert response.status_code == 400
    assert "already exists" in str(response.json())


def test_pause_resume_and_next_runs(operator_api, viewer_api):
    task = recurring_task_create(name="sync", handler=HANDLER, period=dt.timedelta(days=1))
    member = member_create(external_id="alice")
    assert viewer_api.post(f"/api/recurring-tasks/{task.id}/pause/").status_code == 403
    assert operator_api.post(f"/api/recurring-tasks/{task.id}/pause/").json()["active"] is False
    assert (
        viewer_api.get(f"/api/recurring-tasks/{task.id}/members/{member.id}/next-runs/").json()[
            "runs"
        ]
        == []
    )
    assert operator_api.post(f"/api/recurring-tasks/{task.id}/resume/").json()["active"] is True
    runs = viewer_api.get(f"/api/recurring-tasks/{task.id}/members/{member.id}/next-runs/").json()
    assert runs["member"] == "alice" and len(runs["runs"]) == 5
    first = dt.datetime.fromisoformat(runs["runs"][0])
    second = dt.datetime.fromisoformat(runs["runs"][1])
    assert first >= timezone.now() - dt.timedelta(seconds=1)
    assert second - first == dt.timedelta(days=1)
    assert operator_api.post("/api/recurring-tasks/999/pause/").status_code == 404
    assert RecurringTask.objects.get(id=task.id).active
    assert Member.objects.count() == 1
