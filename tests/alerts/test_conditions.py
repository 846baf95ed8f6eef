"""Each kind of rule's condition, read from the real database."""

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.alerts import conditions
from tasksapp.alerts.models import AlertKind
from tasksapp.alerts.services import alert_rule_create
from tasksapp.engine.models import Dispatcher, JobQueue, JobState, WorkerProcess
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)


def rule(kind, threshold, **extra):
    return alert_rule_create(
        name=f"{kind}-{threshold}-{sorted(extra.items())}",
        kind=kind,
        threshold=threshold,
        emails="ops@example.com",
        **extra,
    )


def ago(seconds: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=seconds)


def dead(handler: str, finished_seconds_ago: float):
    at = ago(finished_seconds_ago)
    return JobFactory(handler=handler, state=JobState.DEAD, run_at=at, finished_at=at)


def test_dead_jobs_per_handler_within_the_window_at_the_threshold():
    r = rule(AlertKind.DEAD_JOBS, 2, window=dt.timedelta(minutes=10))
    dead("app.a", 60)
    dead("app.a", 120)
    dead("app.b", 60)  # one only: under the threshold
    dead("app.c", 60)
    dead("app.c", 700)  # before the window
    JobFactory(handler="app.b", state=JobState.SUCCEEDED, finished_at=ago(30))
    keys = conditions.firing_keys(r, NOW)
    assert list(keys) == ["app.a"]
    assert keys["app.a"] == "2 job(s) of app.a went dead in the last 600 s (threshold 2)"


def test_dead_jobs_scoped_to_a_handler():
    r = rule(AlertKind.DEAD_JOBS, 1, handler="app.b")
    dead("app.a", 60)
    assert conditions.firing_keys(r, NOW) == {}
    dead("app.b", 60)
    assert list(conditions.firing_keys(r, NOW)) == ["app.b"]


def test_oldest_due_per_queue_and_paused_queues_left_out():
    r = rule(AlertKind.OLDEST_DUE, 120)
    JobFactory(queue="default", run_at=ago(300))
    JobFactory(queue="fast", run_at=ago(60))  # not old enough
    JobFactory(queue="mail", run_at=ago(500), state=JobState.CLAIMED)  # claimed, not started
    JobFactory(queue="held", run_at=ago(900))
    JobFactory(queue="done", run_at=ago(900), state=JobState.SUCCEEDED)
    JobFactory(queue="later", run_at=NOW + dt.timedelta(hours=1))
    JobQueue.objects.create(name="held", paused=True)
    keys = conditions.firing_keys(r, NOW)
    assert sorted(keys) == ["default", "mail"]
    assert keys["default"] == (
        "queue default: its oldest due job has waited 300 s (threshold 120 s)"
    )


def test_start_lag_p95_over_the_window():
    r = rule(AlertKind.START_LAG, 5, window=dt.timedelta(minutes=5))
    for i in range(20):  # 3 slow starts in 20: the 95th percentile is slow
        lag = 30 if i >= 17 else 0.5
        JobFactory(queue="default", run_at=ago(100 + lag), started_at=ago(100))
    for i in range(20):  # 1 slow start in 20: the 95th percentile is not
        lag = 30 if i == 19 else 0.5
        JobFactory(queue="fast", run_at=ago(100 + lag), started_at=ago(100))
    JobFactory(queue="fast", run_at=ago(2100), started_at=ago(2000))  # before the windows
    keys = conditions.firing_keys(r, NOW)
    assert list(keys) == ["default"]
    assert keys["default"] == (
        "queue default: start lag p95 30.0 s over 20 start(s) (threshold 5 s)"
    )
    assert conditions.firing_keys(rule(AlertKind.START_LAG, 5, queue="fast"), NOW) == {}


def test_no_worker_for_a_queue_with_due_work():
    r = rule(AlertKind.NO_WORKER, 0)
    JobFactory(queue="default", run_at=ago(10))
    JobFactory(queue="mail", run_at=ago(10))
    JobFactory(queue="reports", run_at=ago(10))
    WorkerProcess.objects.create(name="w1", hostname="h", pid=1, heartbeat_at=ago(5), queues=[])
    WorkerProcess.objects.create(
        name="w2", hostname="h", pid=2, heartbeat_at=ago(5), queues=["mail"]
    )
    WorkerProcess.objects.create(  # silent for too long: serves nothing
        name="w3", hostname="h", pid=3, heartbeat_at=ago(40), queues=["reports"]
    )
    keys = conditions.firing_keys(r, NOW)
    assert list(keys) == ["reports"]
    assert keys["reports"] == (
        "queue reports: 1 due job(s), the oldest waiting 10 s, and no live worker serving it"
    )
    assert conditions.firing_keys(rule(AlertKind.NO_WORKER, 60), NOW) == {}


def test_dispatcher_gone_when_stale_and_not_stopped():
    r = rule(AlertKind.DISPATCHER_GONE, 30)
    Dispatcher.objects.create(name="d-live", hostname="h", pid=1, heartbeat_at=ago(5))
    Dispatcher.objects.create(name="d-gone", hostname="h", pid=2, heartbeat_at=ago(90))
    Dispatcher.objects.create(
        name="d-stopped", hostname="h", pid=3, heartbeat_at=ago(90), stopped_at=ago(89)
    )
    keys = conditions.firing_keys(r, NOW)
    assert keys == {"d-gone": "dispatcher d-gone: no heartbeat for 90 s and not stopped"}
