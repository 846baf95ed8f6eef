"""A recurring job whose member left its task's audience does not run, whether or not
its handler reads ctx.member_object: the worker's check before the handler cancels it
with the reason in its history (tasksapp/recurring/member_objects.py). Through the real
executor, against the real database."""

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.recurring import member_objects
from tasksapp.recurring.models import Member
from tasksapp.recurring.services import (
    member_create_many,
    plan_due_slices,
    recurring_task_create,
)
from tests.factories import JobFactory

HANDLER = "tests.handlers.recording.record"  # never reads ctx.member_object
DAY = dt.timedelta(days=1)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _planning(settings):
    settings.TEMPO_PLANNING = {
        "PHASE_STRATEGY": "golden",
        "HORIZON_SECONDS": 26 * 3600.0,
        "LATE_GRACE_SECONDS": 900.0,
    }
    member_objects._has_audience.clear()


def planned_jobs(task) -> dict[str, Job]:
    """The task's planned job of each member, by the member's object id (or external id),
    made due now."""
    jobs = Job.objects.filter(payload__recurring_task_id=task.id)
    jobs.update(run_at=timezone.now())
    members = dict(Member.objects.values_list("id", "object_id"))
    externals = dict(Member.objects.values_list("id", "external_id"))
    return {members[j.payload["member_id"]] or externals[j.payload["member_id"]]: j for j in jobs}


def run(*jobs: Job) -> None:
    claims = job_claim_due(ids=[j.id for j in jobs], owner="d", ttl=10)
    assert execute_batch([[c.id, c.token, c.run_at_ms] for c in claims]) == len(jobs)


def test_a_member_that_left_the_audience_is_cancelled_with_the_reason(effects):
    stays, leaves = User.objects.bulk_create(User(username=n) for n in ("stays", "leaves"))
    task = recurring_task_create(
        name="audience",
        handler=HANDLER,
        period=DAY,
        slices=24,
        epoch=timezone.now() - dt.timedelta(hours=3),
        audience="auth.User",
        audience_filter={"is_active": True},
    )
    plan_due_slices()
    jobs = planned_jobs(task)
    # Left the audience past the signals (no pass has run since): the check still sees it.
    User.objects.filter(pk=leaves.pk).update(is_active=False)
    run(jobs[str(stays.pk)], jobs[str(leaves.pk)])
    ran, cancelled = (Job.objects.get(id=jobs[str(u.pk)].id) for u in (stays, leaves))
    assert ran.state == JobState.SUCCEEDED and effects.count(ran.id) == 1
    assert cancelled.state == JobState.CANCELLED and effects.count(cancelled.id) == 0
    (event,) = cancelled.history
    assert event["event"] == "cancelled"
    assert event["reason"].endswith("left the audience of task audience")


def test_jobs_of_tasks_without_an_audience_and_plain_jobs_run_unchecked(effects):
    member_create_many(external_ids=["m1"])
    task = recurring_task_create(
        name="plain",
        handler=HANDLER,
        period=DAY,
        slices=24,
        epoch=timezone.now() - dt.timedelta(hours=3),
    )
    plan_due_slices()
    recurring = planned_jobs(task)["m1"]
    plain = JobFactory(handler=HANDLER, payload={"recurring_task_id": "not a task id"})
    run(recurring, plain)
    for job in (recurring, plain):
        job.refresh_from_db()
        assert job.state == JobState.SUCCEEDED and effects.count(job.id) == 1
