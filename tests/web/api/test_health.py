"""GET /api/health/: a stall is never shown healthy. Per queue, the due jobs not started
and the age of the oldest; 503 when that age passes the stall limit, or when due work has
no live dispatcher or no live worker serving its queue."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tasksapp.engine.models import Dispatcher, JobQueue, JobState, WorkerProcess
from tests.web.dashboard.fixtures import make_job

pytestmark = pytest.mark.django_db
URL = "/api/health/"


def _ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)


@pytest.fixture
def live_processes(db):
    Dispatcher.objects.create(name="d1", hostname="h", pid=1)
    WorkerProcess.objects.create(name="w1", hostname="h", pid=2, queues=["default"])


def _queue(answer: dict, name: str = "default") -> dict:
    return next(q for q in answer["queues"] if q["queue"] == name)


def test_an_idle_system_is_healthy_and_strangers_get_the_verdict_only():
    response = APIClient().get(URL)
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "problems": 0}


def test_due_work_that_waits_past_the_limit_is_a_stall(viewer_api, live_processes):
    make_job(run_at=_ago(120))
    make_job(run_at=_ago(5))
    make_job(state=JobState.CLAIMED, run_at=_ago(90))  # claimed, never started
    make_job(state=JobState.RUNNING, run_at=_ago(300))  # started: not waiting
    make_job(run_at=timezone.now() + dt.timedelta(minutes=5))  # not due yet

    response = viewer_api.get(URL)

    assert response.status_code == 503
    answer = response.json()
    assert answer["status"] == "unhealthy"
    queue = _queue(answer)
    assert queue["due"] == 3
    assert 119 <= queue["oldest_due_seconds"] < 180
    assert queue["workers"] == 1
    assert answer["problems"] == [
        f"queue default: its oldest due job has waited {queue['oldest_due_seconds']:.0f} s "
        "(limit 60 s)"
    ]
    assert [d["name"] for d in answer["dispatchers"]] == ["d1"]
    assert APIClient().get(URL).json() == {"status": "unhealthy", "problems": 1}


def test_fresh_due_work_with_live_processes_is_healthy(viewer_api, live_processes):
    make_job(run_at=_ago(5))
    response = viewer_api.get(URL)
    assert response.status_code == 200
    assert _queue(response.json())["due"] == 1


def test_due_work_without_a_live_worker_for_its_queue_is_unhealthy(viewer_api, live_processes):
    make_job(run_at=_ago(1), queue="mail")
    WorkerProcess.objects.create(name="w-old", hostname="h", pid=3, queues=["mail"])
    WorkerProcess.objects.filter(name="w-old").update(heartbeat_at=_ago(45))  # frozen

    answer = viewer_api.get(URL).json()

    assert answer["problems"] == ["queue mail has due work and no live worker serving it"]
    assert {w["name"]: w["alive"] for w in answer["workers"]} == {"w1": True, "w-old": False}


def test_due_work_without_a_live_dispatcher_is_unhealthy(viewer_api):
    WorkerProcess.objects.create(name="w1", hostname="h", pid=2, queues=["default"])
    Dispatcher.objects.create(name="d-gone", hostname="h", pid=1, stopped_at=timezone.now())
    make_job(run_at=_ago(1))
    response = viewer_api.get(URL)
    assert response.status_code == 503
    assert response.json()["problems"] == ["queue default has due work and no live dispatcher"]


def test_a_paused_queue_waits_by_design(viewer_api, live_processes):
    JobQueue.objects.create(name="reports", paused=True)
    make_job(run_at=_ago(600), queue="reports")
    response = viewer_api.get(URL)
    assert response.status_code == 200
    assert _queue(response.json(), "reports")["paused"] is True


def test_the_stall_limit_is_a_setting(viewer_api, live_processes, settings):
    settings.TEMPO_HEALTH_STALL_SECONDS = 10
    make_job(run_at=_ago(20))
    assert viewer_api.get(URL).status_code == 503
