"""A job page while a cancel request is pending, and a snoozed job's timeline."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from tasksapp.engine.models import JobState
from tests.web.dashboard.fixtures import make_job

pytestmark = pytest.mark.django_db


def test_a_running_job_offers_cancel_then_shows_the_request(operator_client):
    job = make_job(JobState.RUNNING)
    page = reverse("dashboard:job-detail", args=[job.id])
    assert 'id="cancel"' in operator_client.get(page).content.decode()
    operator_client.post(reverse("dashboard:job-action", args=[job.id, "cancel"]))
    html = operator_client.get(page).content.decode()
    assert 'id="cancel-requested"' in html and "cancel requested" in html
    assert 'id="cancel"' not in html  # asked once; the worker ends it


def test_a_snoozed_jobs_timeline_shows_each_snooze(viewer_client):
    at = timezone.now().isoformat()
    job = make_job(history=[{"event": "snoozed", "at": at, "attempt": 1, "seconds": 30.0}])
    html = viewer_client.get(reverse("dashboard:job-detail", args=[job.id])).content.decode()
    assert "snoozed" in html and "attempt 1 asked to run again in 30.0 s" in html
