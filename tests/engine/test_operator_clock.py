"""An operator's transitions (retry, cancel, run now) are the store's, on the database
clock like every other transition: a web or CLI process whose own clock is off by a day
does not move a job a day away."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from tasksapp.engine.models import JobState
from tasksapp.engine.services import job_cancel, job_retry, job_run_now
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
SKEW = dt.timedelta(days=1)


def _database_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def _off_by_a_day():
    return time_machine.travel(timezone.now() + SKEW, tick=True)


def test_run_now_is_the_databases_now():
    job = JobFactory(run_at=timezone.now() + dt.timedelta(hours=5))
    with _off_by_a_day():
        moved = job_run_now(job_id=job.id)
    assert abs(moved.run_at - _database_now()) < dt.timedelta(minutes=1)


def test_a_retry_is_due_at_the_databases_now():
    job = JobFactory(state=JobState.DEAD, attempts=3, max_attempts=3)
    with _off_by_a_day():
        retried = job_retry(job_id=job.id)
    assert retried.state == JobState.SCHEDULED
    assert retried.max_attempts == 4
    assert abs(retried.run_at - _database_now()) < dt.timedelta(minutes=1)


def test_a_cancel_is_stamped_by_the_database():
    waiting = JobFactory(run_at=timezone.now() + dt.timedelta(hours=1))
    running = JobFactory(state=JobState.RUNNING, lease_token=1)
    with _off_by_a_day():
        cancelled = job_cancel(job_id=waiting.id)
        asked = job_cancel(job_id=running.id)
    assert cancelled.state == JobState.CANCELLED
    assert abs(cancelled.finished_at - _database_now()) < dt.timedelta(minutes=1)
    assert asked.state == JobState.RUNNING
    assert abs(asked.cancel_requested_at - _database_now()) < dt.timedelta(minutes=1)
