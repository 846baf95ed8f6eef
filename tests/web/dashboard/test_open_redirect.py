"""Open redirects: a `next` that leads off this site is ignored after a login and after
a dashboard action, in every spelling browsers accept."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tasksapp.engine.models import JobState
from tests.web.dashboard.fixtures import make_job

pytestmark = pytest.mark.django_db
OFF_SITE = [
    "https://evil.example/",
    "//evil.example/",
    "///evil.example/",
    "/\\evil.example/",
    "\\\\evil.example/",
    "https:evil.example",
    "http://testserver@evil.example/",
    " //evil.example/",
    "\t//evil.example/",
    "javascript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
]


def _is_on_site(location: str) -> bool:
    return location.startswith("/") and not location.startswith(("//", "/\\"))


@pytest.mark.parametrize("target", OFF_SITE)
def test_login_never_redirects_off_site(viewer, target):
    credentials = {"username": "vera", "password": "vera-password-1", "next": target}
    response = Client().post(reverse("dashboard:login"), credentials)
    assert response.status_code == 302
    assert _is_on_site(response["Location"]), response["Location"]


@pytest.mark.parametrize("target", OFF_SITE)
def test_an_action_never_redirects_off_site(operator_client, target):
    job = make_job()
    url = reverse("dashboard:job-action", args=[job.id, "cancel"])
    response = operator_client.post(url, {"next": target})
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:job-detail", args=[job.id])
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_a_next_on_this_site_is_followed(viewer):
    response = Client().post(
        reverse("dashboard:login"),
        {"username": "vera", "password": "vera-password-1", "next": "/jobs/?state=dead"},
    )
    assert response["Location"] == "/jobs/?state=dead"
