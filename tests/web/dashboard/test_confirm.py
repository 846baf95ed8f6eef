"""Cancel and pause ask first: the button opens a confirmation page (GET, nothing
changes); its form posts to the action with the CSRF token and comes back."""

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse

from tasksapp.engine.models import Job, JobState
from tasksapp.recurring.models import RecurringTask
from tasksapp.recurring.services import recurring_task_create
from tasksapp.schedules.models import Schedule
from tasksapp.schedules.services import schedule_create
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER, make_job

pytestmark = pytest.mark.django_db


def confirm_url(kind: str, target, action: str) -> str:
    return reverse("dashboard:action-confirm", args=[kind, target, action])


def test_the_job_page_cancel_button_opens_the_confirmation(operator_client):
    job = make_job()
    page = operator_client.get(reverse("dashboard:job-detail", args=[job.id])).content.decode()
    assert f'href="{confirm_url("jobs", job.id, "cancel")}"' in page


def test_confirming_a_cancel_asks_first_then_cancels_with_csrf(operator, operator_client):
    job = make_job()
    page = operator_client.get(confirm_url("jobs", job.id, "cancel"))
    body = page.content.decode()
    assert page.status_code == 200 and f"Cancel job {job.id}?" in body
    assert "it ends cancelled at once" in body and "csrfmiddlewaretoken" in body
    assert Job.objects.get(id=job.id).state == JobState.SCHEDULED
    assert not OperatorAction.objects.exists()
    # The confirmation's form: with the token (a client that enforces CSRF, as a browser).
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    form = strict.get(confirm_url("jobs", job.id, "cancel"))
    token = form.context["csrf_token"]
    action = reverse("dashboard:job-action", args=[job.id, "cancel"])
    assert strict.post(action, {"next": "/"}).status_code == 403  # no token: refused
    done = strict.post(action, {"csrfmiddlewaretoken": str(token), "next": "/jobs/"})
    assert done.status_code == 302 and done["Location"] == "/jobs/"
    assert Job.objects.get(id=job.id).state == JobState.CANCELLED


def test_a_running_job_confirmation_says_the_worker_is_asked(operator_client):
    job = make_job(JobState.RUNNING)
    body = operator_client.get(confirm_url("jobs", job.id, "cancel")).content.decode()
    assert "its worker is asked to stop the handler" in body


def test_pausing_a_task_and_a_schedule_asks_first(operator_client):
    task = recurring_task_create(name="nightly", handler=HANDLER, period=dt.timedelta(days=1))
    schedule = schedule_create(name="hourly", handler=HANDLER, cron="0 * * * *")
    detail = operator_client.get(reverse("dashboard:recurring-detail", args=[task.id]))
    assert confirm_url("recurring", task.id, "pause") in detail.content.decode()
    body = operator_client.get(confirm_url("recurring", task.id, "pause")).content.decode()
    assert "Pause the recurring task nightly?" in body
    body = operator_client.get(confirm_url("schedules", schedule.id, "pause")).content.decode()
    assert "Pause the schedule hourly?" in body
    assert RecurringTask.objects.get(id=task.id).active
    assert Schedule.objects.get(id=schedule.id).active


def test_nothing_else_has_a_confirmation_and_viewers_get_none(operator_client, viewer_client):
    job = make_job()
    assert operator_client.get(confirm_url("jobs", job.id, "retry")).status_code == 404
    assert operator_client.get(confirm_url("jobs", "12x", "cancel")).status_code == 404
    assert operator_client.get(confirm_url("jobs", 10**15, "cancel")).status_code == 404
    assert viewer_client.get(confirm_url("jobs", job.id, "cancel")).status_code == 403
