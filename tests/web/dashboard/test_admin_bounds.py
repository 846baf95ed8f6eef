"""The admin's job and recurring task forms refuse a time limit past one day with the
services' message; nothing is stored."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tasksapp.engine.models import Job
from tasksapp.engine.options import ERR_TIME_LIMIT
from tasksapp.recurring.models import RecurringTask
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.test_admin import _job_form, _task_form, admin_client  # noqa: F401

# The fixture imported above is used as a test argument:
# ruff: noqa: F811

pytestmark = pytest.mark.django_db


def shown(response) -> str:
    return response.content.decode().replace("&#x27;", "'")


@pytest.mark.parametrize("limit", ["86400.5", "172800", "1e9"])
def test_a_job_with_a_time_limit_past_a_day_is_not_added(admin_client, limit):
    response = admin_client.post(reverse("admin:tasksapp_job_add"), _job_form(time_limit=limit))
    assert response.status_code == 200
    assert ERR_TIME_LIMIT in shown(response)
    assert not Job.objects.exists() and not OperatorAction.objects.exists()


def test_a_job_with_a_time_limit_of_a_day_is_added(admin_client):
    response = admin_client.post(reverse("admin:tasksapp_job_add"), _job_form(time_limit="86400"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Job.objects.get().time_limit == 86_400


def test_a_recurring_task_with_a_time_limit_past_a_day_shows_it_on_the_field(admin_client):
    form = _task_form(time_limit="172800", period="30 00:00:00", slices="1")
    response = admin_client.post(reverse("admin:tasksapp_recurringtask_add"), form)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert errors == {"time_limit": [ERR_TIME_LIMIT]}
    assert not RecurringTask.objects.exists()
