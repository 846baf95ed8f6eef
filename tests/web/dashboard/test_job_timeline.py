"""A job's timeline after an operator's retry: the start of the earlier run is not
measured against the new run time, and the final state the retry left stays shown."""

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.engine.models import JobState
from tasksapp.web.operators import job_retry_audited
from tasksapp.web.selectors.jobs import job_get, job_timeline
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def dead_job():
    failed = timezone.now() - dt.timedelta(minutes=2)
    started = failed - dt.timedelta(seconds=1)
    return JobFactory(
        state=JobState.DEAD,
        run_at=started - dt.timedelta(milliseconds=40),
        claimed_at=started,
        started_at=started,
        finished_at=failed,
        attempts=1,
        max_attempts=1,
        last_error="RuntimeError: boom",
        errors=[{"attempt": 1, "at": failed.isoformat(), "kind": "error", "error": "boom"}],
    )


def test_before_a_retry_the_start_shows_its_lag():
    job = dead_job()
    started = next(e for e in job_timeline(job=job) if e.label == "started")
    assert started.detail == "attempt 1, lag 40 ms"


def test_after_a_retry_no_negative_lag_and_the_dead_entry_stays(operator):
    job = dead_job()
    failed_at = job.finished_at
    job_retry_audited(user=operator, job_id=job.id, via="dashboard")
    job = job_get(job_id=job.id)
    assert job.state == JobState.SCHEDULED and job.finished_at is None
    events = job_timeline(job=job)
    labels = [e.label for e in events]
    started = events[labels.index("started")]
    assert started.detail == "attempt 1, before the job was due again"
    assert all("lag -" not in e.detail for e in events)
    dead = events[labels.index("dead")]
    assert dead.at == failed_at and dead.kind == "error"
    retry = events[labels.index("retry")]
    assert retry.detail == f"by {operator.username} via dashboard, was dead"
    # In time order: failed, dead, retried.
    assert labels.index("attempt 1 failed") < labels.index("dead") < labels.index("retry")
    assert abs(retry.at - job.run_at) < dt.timedelta(seconds=5)  # due again at the retry
