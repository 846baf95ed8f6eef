"""Planners racing, each on its own database connection: every fire time gets exactly
one job and one run, whether the planners share the work through the row locks or both
decide the same fire times from the same stale state."""

import datetime as dt
import threading

import pytest
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from tasksapp.engine.models import Job
from tasksapp.schedules.models import Schedule, ScheduleRun
from tasksapp.schedules.services import schedule_create, schedules_plan_due
from tasksapp.schedules.services.planner import PlanSummary, _plan_batch

pytestmark = pytest.mark.django_db(transaction=True)
HANDLER = "tests.handlers.recording.record"


def race(target, count=2):
    barrier = threading.Barrier(count)
    results, errors = [], []

    def run():
        try:
            barrier.wait()
            results.append(target())
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


def paused_schedules(count, *, cron="* * * * *"):
    ids = [
        schedule_create(name=f"s{i}", handler=HANDLER, cron=cron, active=False).id
        for i in range(count)
    ]
    Schedule.objects.filter(id__in=ids).update(active=True, planned_until=timezone.now())
    return ids


def assert_one_job_and_run_per_fire(expected):
    keys = list(Job.objects.values_list("idempotency_key", flat=True))
    assert len(keys) == len(set(keys)) == expected
    runs = ScheduleRun.objects.all()
    assert runs.count() == expected
    assert set(runs.values_list("job_id", flat=True)) == set(
        Job.objects.values_list("id", flat=True)
    )


def test_two_planners_share_the_due_schedules(settings):
    settings.TEMPO_SCHEDULES = {"HORIZON_SECONDS": 300, "BATCH_SIZE": 20}
    paused_schedules(120)
    summaries = race(schedules_plan_due)
    # each is planned once; a planner whose clock read later tops up what the other did
    assert sum(s.schedules for s in summaries) >= 120
    assert not Schedule.objects.filter(planned_until__lt=timezone.now()).exists()
    total = sum(s.jobs for s in summaries)
    assert 120 * 5 <= total <= 120 * 6  # 5 or 6 minutes ahead, by when the minute falls
    assert_one_job_and_run_per_fire(total)


def test_two_planners_deciding_the_same_fires_create_one_job_each():
    """No lock between them: both read the schedules before either writes."""
    paused_schedules(30)
    now = timezone.now()
    snapshot = list(Schedule.objects.all())

    def plan_stale():
        close_old_connections()
        summary = PlanSummary()
        copies = [Schedule.objects.get(id=s.id) for s in snapshot]  # this connection's own
        with transaction.atomic():
            _plan_batch(copies, now=now, summary=summary)
        return summary

    summaries = race(plan_stale)
    inserted = [s.jobs for s in summaries]
    assert sum(inserted) == Job.objects.count() and min(inserted) == 0
    assert_one_job_and_run_per_fire(Job.objects.count())
    assert Job.objects.count() >= 30 * 5
    assert all(s.planned_until > now + dt.timedelta(minutes=4) for s in Schedule.objects.all())


PLANNER = """
import json, os, sys, time
import django
django.setup()
from django.conf import settings
from tasksapp.schedules.services import schedules_plan_due
from tasksapp.schedules.settings import schedule_settings
settings.TEMPO_SCHEDULES = {"BATCH_SIZE": 20}  # 15 batches: the planners interleave
schedule_settings.cache_clear()
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))  # all start at one instant
print(json.dumps(schedules_plan_due().as_dict()))
"""


@pytest.mark.processes
def test_planner_processes_racing_create_one_job_per_fire(settings):
    """Three planner processes (as three beats would run them) started at one instant."""
    import json
    import os
    import subprocess
    import sys
    import time

    from tests.processes.conftest import database_url

    ids = paused_schedules(300)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "schedapp.settings",
    }
    start = time.time() + 8
    planners = [
        subprocess.Popen(
            [sys.executable, "-c", PLANNER, str(start)], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    summaries = [
        json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in planners
    ]
    assert all(p.returncode == 0 for p in planners)
    total = sum(s["jobs"] for s in summaries)
    assert total == Job.objects.count() >= 300 * 5
    assert_one_job_and_run_per_fire(total)
    assert sum(s["schedules"] for s in summaries) >= len(ids), summaries
