"""A job's timeline after an operator's retry: the start of the earlier run is not
measured against the new run time, and the final state the retry left stays shown; every
event of its history, a cancel with its reason."""

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.recurring import member_objects
from tasksapp.recurring.models import Member
from tasksapp.recurring.services import plan_due_slices, recurring_task_create
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


@pytest.mark.django_db(transaction=True)
def test_a_job_cancelled_because_its_member_left_its_audience_shows_the_reason(
    effects, viewer_client, settings
):
    """Through the worker's check before the handler (the member left the audience past
    the signals, before any pass): the job page's timeline tells the reason, once, the
    task's name in it escaped."""
    settings.TEMPO_PLANNING = {"PHASE_STRATEGY": "golden", "LATE_GRACE_SECONDS": 900.0}
    member_objects._has_audience.clear()
    leaves = User.objects.create(username="leaves")
    task = recurring_task_create(
        name="sync <b>users</b>",
        handler="tests.handlers.recording.record",
        period=dt.timedelta(days=1),
        slices=24,
        epoch=timezone.now() - dt.timedelta(hours=3),
        audience="auth.User",
        audience_filter={"is_active": True},
    )
    plan_due_slices()
    member = Member.objects.get(object_id=str(leaves.pk))
    mine = Job.objects.filter(payload__recurring_task_id=task.id, payload__member_id=member.id)
    job = mine.order_by("run_at").first()  # the first of the periods planned
    Job.objects.filter(id=job.id).update(run_at=timezone.now())
    User.objects.filter(pk=leaves.pk).update(is_active=False)
    claims = job_claim_due(ids=[job.id], owner="d", ttl=10)
    assert execute_batch([[c.id, c.token, c.run_at_ms] for c in claims]) == 1
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and effects.count(job.id) == 0
    (event,) = job.history
    assert event["event"] == "cancelled"
    html = viewer_client.get(reverse("dashboard:job-detail", args=[job.id])).content.decode()
    timeline = html[html.index('id="timeline"') : html.index("</ul>", html.index('id="timeline"'))]
    reason = event["reason"].replace("<", "&lt;").replace(">", "&gt;")
    assert "left the audience of task sync &lt;b&gt;users&lt;/b&gt;" in reason
    assert reason in timeline and "<b>users</b>" not in html
    assert timeline.count("<strong>cancelled</strong>") == 1  # the entry is the finish


def test_every_history_kind_is_shown_and_a_waiting_jobs_cancel_tells_its_reason():
    at = timezone.now()
    job = JobFactory(
        state=JobState.CANCELLED,
        finished_at=at + dt.timedelta(minutes=5),
        last_error="the member left the audience of task t (or its object was deleted)",
        history=[
            {"event": "snoozed", "at": at.isoformat(), "attempt": 1, "seconds": 30.0},
            {
                "event": "cancelled",
                "at": (at + dt.timedelta(minutes=1)).isoformat(),
                "reason": "an operator asked",
            },
            {"event": "moved", "at": (at + dt.timedelta(minutes=2)).isoformat(), "to": "q2"},
        ],
    )
    shown = [(e.label, e.detail) for e in job_timeline(job=job)]
    assert ("snoozed", "attempt 1 asked to run again in 30.0 s") in shown
    assert ("cancelled", "an operator asked") in shown
    assert ("moved", "to q2") in shown
    # Cancelled again later, waiting (by the audience pass): the finish tells why.
    assert ("cancelled", job.last_error) in shown
