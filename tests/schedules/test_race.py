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
