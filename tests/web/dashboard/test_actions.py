"""Operator actions on the dashboard: POST with CSRF, operators only, recorded."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.recurring.models import RecurringTask
from tasksapp.recurring.services import recurring_task_create
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER, make_job

pytestmark = pytest.mark.django_db


def _action(job: Job, action: str) -> str:
    return reverse("dashboard:job-action", args=[job.id, action])


def test_operator_cancels_a_job(operator_client, operator):
    job = make_job()
    response = operator_client.post(_action(job, "cancel"), follow=True)
    assert response.redirect_chain[-1][0] == reverse("dashboard:job-detail", args=[job.id])
    assert f"Job {job.id} cancelled." in response.content.decode()
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    record = OperatorAction.objects.get()
    assert (record.user, record.username, record.action, record.via) == (
        operator,
        "otto",
        "cancel",
        "dashboard",
    )
    assert (record.target_type, record.target_id) == ("job", str(job.id))
    assert record.details["state_before"] == "scheduled"
    assert record.details["state_after"] == "cancelled"
    assert timezone.now() - record.at < dt.timedelta(minutes=1)


def test_operator_retries_and_runs_now(operator_client):
    dead = make_job(JobState.DEAD, attempts=5, max_attempts=5)
    operator_client.post(_action(dead, "retry"))
    dead.refresh_from_db()
    assert dead.state == JobState.SCHEDULED and dead.max_attempts == 6
    later = make_job(run_at=timezone.now() + dt.timedelta(days=2))
    operator_client.post(_action(later, "run-now"))
    later.refresh_from_db()
    assert later.state == JobState.SCHEDULED
    assert later.run_at <= timezone.now()
    assert list(OperatorAction.objects.order_by("id").values_list("action", flat=True)) == [
        "retry",
        "run_now",
    ]


def test_a_refused_transition_is_shown_and_not_recorded(operator_client):
    done = make_job(JobState.SUCCEEDED)
    response = operator_client.post(_action(done, "cancel"), follow=True)
    assert "only scheduled, failed, claimed or running jobs" in response.content.decode()
    done.refresh_from_db()
    assert done.state == JobState.SUCCEEDED
    assert not OperatorAction.objects.exists()


def test_viewer_is_refused_nothing_changes_and_the_attempt_is_recorded(viewer_client, viewer):
    job = make_job()
    for action in ("cancel", "retry", "run-now"):
        response = viewer_client.post(_action(job, action))
        assert response.status_code == 403
        assert "only operators can retry, cancel" in response.content.decode()
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED
    rows = OperatorAction.objects.order_by("id")
    assert [(a.action, a.target_type, a.target_id, a.user_id, a.via) for a in rows] == [
        (f"denied:{action}", "job", str(job.id), viewer.id, "dashboard")
        for action in ("cancel", "retry", "run_now")
    ]
    assert rows[0].details["reason"] == "needs the operator role"


def test_anonymous_post_goes_to_login(client):
    job = make_job()
    response = client.post(_action(job, "cancel"))
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert Job.objects.get(id=job.id).state == JobState.SCHEDULED


def test_actions_are_post_only(operator_client):
    job = make_job()
    assert operator_client.get(_action(job, "cancel")).status_code == 405
    assert Job.objects.get(id=job.id).state == JobState.SCHEDULED


def test_unknown_action_is_404(operator_client):
    job = make_job()
    assert operator_client.post(_action(job, "explode")).status_code == 404


def test_csrf_token_is_required(operator):
    job = make_job()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post(_action(job, "cancel"))
    assert response.status_code == 403
    assert Job.objects.get(id=job.id).state == JobState.SCHEDULED
    page = client.get(reverse("dashboard:job-detail", args=[job.id]))
    token = page.context["csrf_token"]
    response = client.post(_action(job, "cancel"), {"csrfmiddlewaretoken": str(token)})
    assert response.status_code == 302
    assert Job.objects.get(id=job.id).state == JobState.CANCELLED


def test_next_only_redirects_to_this_site(operator_client):
    job = make_job()
    response = operator_client.post(_action(job, "cancel"), {"next": "https://evil.example/"})
    assert response["Location"] == reverse("dashboard:job-detail", args=[job.id])
    job = make_job()
    response = operator_client.post(_action(job, "cancel"), {"next": "/jobs/?state=cancelled"})
    assert response["Location"] == "/jobs/?state=cancelled"


@pytest.fixture
def task() -> RecurringTask:
    return recurring_task_create(name="sync", handler=HANDLER, period=dt.timedelta(days=1))


def test_operator_pauses_and_resumes_a_task(operator_client, task):
    url = reverse("dashboard:task-action", args=[task.id, "pause"])
    response = operator_client.post(url, follow=True)
    assert "sync paused" in response.content.decode()
    assert not RecurringTask.objects.get(id=task.id).active
    operator_client.post(reverse("dashboard:task-action", args=[task.id, "resume"]))
    assert RecurringTask.objects.get(id=task.id).active
    assert list(OperatorAction.objects.order_by("id").values_list("action", "target_type")) == [
        ("pause", "recurring_task"),
        ("resume", "recurring_task"),
    ]


def test_viewer_cannot_pause_a_task(viewer_client, task):
    url = reverse("dashboard:task-action", args=[task.id, "pause"])
    assert viewer_client.post(url).status_code == 403
    assert RecurringTask.objects.get(id=task.id).active


def test_pausing_a_missing_task_shows_an_error(operator_client):
    url = reverse("dashboard:task-action", args=[987, "pause"])
    response = operator_client.post(url, follow=True)
    assert "recurring task 987 does not exist." in response.content.decode()


def test_audit_page_lists_actions(viewer_client, operator_client):
    job = make_job()
    operator_client.post(_action(job, "cancel"))
    html = viewer_client.get(reverse("dashboard:audit")).content.decode()
    assert "otto" in html and "cancel" in html and f"job {job.id}" in html
    detail = viewer_client.get(reverse("dashboard:job-detail", args=[job.id])).content.decode()
    assert "No operator has acted on this job." not in detail


def test_audit_page_empty_state(viewer_client):
    html = viewer_client.get(reverse("dashboard:audit")).content.decode()
    assert "No operator has acted yet." in html


def test_operator_sees_buttons_viewer_sees_them_disabled(viewer_client, operator_client):
    job = make_job()
    url = reverse("dashboard:job-detail", args=[job.id])
    operator_html = operator_client.get(url).content.decode()
    assert 'id="cancel"' in operator_html and 'id="run-now"' in operator_html
    viewer_html = viewer_client.get(url).content.decode()
    assert 'title="Operators only" disabled' in viewer_html
    assert 'id="run-now"' not in viewer_html


def test_operator_cancels_a_graph_from_its_job_page(operator_client, operator):
    from tasksapp.graphs.models import GraphRun
    from tasksapp.graphs.services import graph_job_schedule

    graph = graph_job_schedule(has={"user_id": 7}, wants=["friends"])
    page = operator_client.get(reverse("dashboard:job-detail", args=[graph.job_id]))
    assert 'id="cancel-graph"' in page.content.decode()
    response = operator_client.post(_action(graph.job, "cancel-graph"), follow=True)
    assert f"Graph {graph.id} is cancelled." in response.content.decode()
    assert 'id="cancel-graph"' not in response.content.decode()
    assert GraphRun.objects.get().state == "cancelled"
    (action,) = OperatorAction.objects.all()
    assert (action.action, action.target_type, action.user) == ("cancel_graph", "graph", operator)
    assert action.details == {
        "job_id": graph.job_id,
        "state_before": "pending",
        "state_after": "cancelled",
    }


def test_cancel_graph_of_a_plain_job_is_refused_and_not_recorded(operator_client):
    job = make_job()
    response = operator_client.post(_action(job, "cancel-graph"), follow=True)
    assert f"job {job.id} belongs to no graph." in response.content.decode()
    assert not OperatorAction.objects.exists()
