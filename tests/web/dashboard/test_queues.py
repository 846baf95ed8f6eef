"""The queues page: unserved queues, paused ones, the routing mode and why; pause, resume
and degraded mode from the dashboard and the admin, operators only, recorded."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from tasksapp.engine.models import Dispatcher, JobQueue, RoutingMode, WorkerProcess
from tasksapp.engine.queues import queue_configure, routing_degrade
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import make_job

pytestmark = pytest.mark.django_db
PAGE = "/queues/"


def _due(queue: str) -> None:
    make_job(queue=queue, run_at=timezone.now() - dt.timedelta(seconds=3))


def test_the_page_shows_an_unserved_queue_and_the_limits(viewer_client):
    _due("ghost")
    _due("mail")
    WorkerProcess.objects.create(name="w", hostname="h", pid=1, queues=["default", "mail"])
    queue_configure(name="mail", concurrency_limit=4, rate_limit=100, rate_period=1)
    page = viewer_client.get(reverse("dashboard:queues")).content.decode()
    ghost = page.split('data-queue="ghost"')[1].split("</tr>")[0]
    assert "no worker" in ghost and "badge down" in ghost
    mail = page.split('data-queue="mail"')[1].split("</tr>")[0]
    assert "served" in mail and "≤ 4 at once" in mail and "≤ 100 starts / 1 s" in mail
    assert "Pause" not in mail  # a viewer sees no action


def test_the_page_shows_degraded_mode_and_why(viewer_client):
    routing_degrade(reason="payments provider down", critical_priority=8)
    Dispatcher.objects.create(
        name="d1", hostname="h", pid=1, degraded_reason="the Redis due index cannot be reached"
    )
    page = viewer_client.get(reverse("dashboard:queues")).content.decode()
    assert "only jobs of priority 8 or above are claimed" in page
    assert "payments provider down" in page
    assert "d1: the Redis due index cannot be reached" in page


def test_an_operator_pauses_and_resumes_a_queue_recorded(operator_client, operator):
    _due("mail")
    url = reverse("dashboard:queue-action", args=["mail", "pause"])
    response = operator_client.post(url, follow=True)
    assert "Queue mail paused" in response.content.decode()
    assert JobQueue.objects.get(name="mail").paused
    operator_client.post(reverse("dashboard:queue-action", args=["mail", "resume"]))
    assert not JobQueue.objects.get(name="mail").paused
    records = list(OperatorAction.objects.order_by("id").values_list("action", "via", "user"))
    assert records == [
        ("queue_pause", "dashboard", operator.id),
        ("queue_resume", "dashboard", operator.id),
    ]


def test_an_operator_switches_degraded_mode_on_and_off(operator_client):
    url = reverse("dashboard:routing-action", args=["degrade"])
    operator_client.post(url, {"reason": "failover", "critical_priority": "high"})
    mode = RoutingMode.objects.get(id=1)
    assert mode.degraded and mode.reason == "failover" and mode.critical_priority == 7
    page = operator_client.get(reverse("dashboard:queues")).content.decode()
    assert "Switch degraded mode off" in page
    operator_client.post(reverse("dashboard:routing-action", args=["restore"]))
    assert not RoutingMode.objects.get(id=1).degraded


def test_a_bad_critical_priority_is_refused_with_its_message(operator_client):
    url = reverse("dashboard:routing-action", args=["degrade"])
    response = operator_client.post(url, {"reason": "x", "critical_priority": "12"}, follow=True)
    assert "critical_priority must be an integer from 0" in response.content.decode()
    assert not RoutingMode.objects.get(id=1).degraded and not OperatorAction.objects.exists()


def test_a_viewer_may_not_pause_and_is_recorded(viewer_client):
    response = viewer_client.post(reverse("dashboard:queue-action", args=["mail", "pause"]))
    assert response.status_code == 403
    assert not JobQueue.objects.exists()
    assert OperatorAction.objects.get().action.startswith("denied:")


def test_the_admin_pauses_queues_and_sets_limits_through_the_service(operator, client):
    operator.is_staff = True
    operator.save()
    client.force_login(operator)
    queue_configure(name="mail")
    changelist = reverse("admin:tasksapp_jobqueue_changelist")
    queue = JobQueue.objects.get(name="mail")
    client.post(changelist, {"action": "pause_queues", "_selected_action": [queue.pk]})
    assert JobQueue.objects.get(name="mail").paused
    change = reverse("admin:tasksapp_jobqueue_change", args=[queue.pk])
    form = {"paused": "", "concurrency_limit": "0", "rate_period": "1"}
    response = client.post(change, form)
    assert "concurrency_limit must be a whole number" in response.content.decode()
    client.post(change, form | {"concurrency_limit": "3"})
    queue.refresh_from_db()
    assert (queue.paused, queue.concurrency_limit) == (False, 3)
    actions = list(OperatorAction.objects.order_by("id").values_list("action", "via"))
    assert actions == [("queue_pause", "admin"), ("queue_configure", "admin")]
