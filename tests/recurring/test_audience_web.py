"""Audiences in the admin and on the dashboard: a task created with one, a bad one
refused with its message, the member page linking to the object, the task's audience
with its size and last sync on the dashboard."""

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from tasksapp.recurring.models import Member, RecurringTask
from tasksapp.recurring.services import audience_sync, recurring_task_create
from tests.web.dashboard.fixtures import *  # noqa: F403  (operator_api and its fixtures)

HANDLER = "tests.handlers.recording.record"

pytestmark = pytest.mark.django_db


def task_form(**overrides) -> dict:
    data = {
        "name": "nightly",
        "handler": HANDLER,
        "payload": "{}",
        "max_attempts": "5",
        "retry_policy": "{}",
        "delivery": "transactional",
        "time_limit": "",
        "epoch_0": "2026-01-01",
        "epoch_1": "00:00:00",
        "period": "1 00:00:00",
        "slices": "24",
        "active": "on",
        "audience": "auth.User",
        "audience_filter": '{"is_active": true}',
        "phase_strategy": "random",
    }
    data.update(overrides)
    return data


def test_admin_creates_a_task_with_an_audience(admin_client):
    response = admin_client.post(reverse("admin:tasksapp_recurringtask_add"), task_form())
    assert response.status_code == 302
    task = RecurringTask.objects.get(name="nightly")
    assert (task.audience, task.audience_filter, task.phase_strategy) == (
        "auth.User",
        {"is_active": True},
        "random",
    )


def test_admin_refuses_a_bad_audience_filter_with_its_message(admin_client):
    response = admin_client.post(
        reverse("admin:tasksapp_recurringtask_add"),
        task_form(audience_filter='{"nope__in": [1]}'),
    )
    assert response.status_code == 200
    assert "audience_filter must be a JSON object of field lookups of auth.User" in (
        response.content.decode()
    )
    assert not RecurringTask.objects.exists()


def test_member_page_links_to_its_object(admin_client, admin_user):
    task = recurring_task_create(
        name="t", handler=HANDLER, period=dt.timedelta(days=1), audience="auth.User"
    )
    audience_sync(task=task)
    member = Member.objects.get(object_id=str(admin_user.pk))
    page = admin_client.get(reverse("admin:tasksapp_member_change", args=[member.pk]))
    assert reverse("admin:auth_user_change", args=[str(admin_user.pk)]) in page.content.decode()


def test_dashboard_shows_audience_size_and_last_sync(admin_client):
    User.objects.bulk_create(User(username=f"u{n}") for n in range(3))
    task = recurring_task_create(
        name="t",
        handler=HANDLER,
        period=dt.timedelta(days=1),
        audience="auth.User",
        audience_filter={"is_active": True},
    )
    audience_sync(task=task)
    html = admin_client.get(reverse("dashboard:recurring-list")).content.decode()
    assert "auth.User" in html and "is_active" in html
    users = User.objects.filter(is_active=True).count()  # theirs and the admin's
    assert f"{users} members" in html and f"+{users} / −0" in html and "synced" in html
    detail = admin_client.get(reverse("dashboard:recurring-detail", args=[task.pk]))
    assert f"{users} members" in detail.content.decode()


def test_api_creates_a_task_with_an_audience_and_refuses_a_bad_one(operator_api):
    body = {"name": "sync", "handler": HANDLER, "period_seconds": 86400, "slices": 24}
    bad = operator_api.post(
        "/api/recurring-tasks/",
        {**body, "audience": "auth.User", "audience_filter": {"groups__nope": "beta"}},
        format="json",
    )
    assert bad.status_code == 400
    assert "audience_filter must be a JSON object of field lookups of auth.User" in str(bad.json())
    assert not RecurringTask.objects.exists()

    made = operator_api.post(
        "/api/recurring-tasks/",
        {**body, "audience": "auth.User", "audience_filter": {"groups__name": "beta"}},
        format="json",
    )
    assert made.status_code == 201, made.json()
    aligned = operator_api.post(
        "/api/recurring-tasks/",
        {**body, "name": "report", "audience": "auth.User", "align_with": made.json()["id"]},
        format="json",
    )
    assert aligned.status_code == 201, aligned.json()
    first, second = made.json(), aligned.json()
    assert first["audience_filter"] == {"groups__name": "beta"}
    assert second["aligned_with"] == first["id"]
    assert second["phase_shift"] == first["phase_shift"] > 0
