"""The overview leads with health: a stall is shown as such, never green."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.engine.models import Dispatcher, WorkerProcess
from tests.web.dashboard.fixtures import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def live_processes(db):
    Dispatcher.objects.create(name="d1", hostname="h", pid=1)
    WorkerProcess.objects.create(name="w1", hostname="h", pid=2, queues=["default"])


def test_a_stalled_queue_is_a_red_banner_with_its_reason(viewer_client, live_processes):
    make_job(run_at=timezone.now() - dt.timedelta(minutes=5))
    page = viewer_client.get("/").content.decode()
    assert 'class="health-banner unhealthy"' in page
    assert "queue default: its oldest due job has waited" in page
    assert '<span class="health-bad">unhealthy</span>' in page
    assert '<tr class="stalled">' in page


def test_fresh_due_work_is_healthy(viewer_client, live_processes):
    make_job(run_at=timezone.now() - dt.timedelta(seconds=2))
    page = viewer_client.get("/").content.decode()
    assert "health-banner" not in page
    assert '<span class="health-ok">healthy</span>' in page
