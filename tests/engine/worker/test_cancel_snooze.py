"""Cancelling a claimed or running job, and a handler's snooze, run in-process against
real PostgreSQL (the worker side: tasksapp/engine/worker/executor.py)."""

from __future__ import annotations

import datetime as dt
import math
import threading

import pytest
from django.db import connection
from django.utils import timezone

from tasksapp.engine import Snooze
from tasksapp.engine.handlers import MAX_SNOOZE_SECONDS
from tasksapp.engine.models import Job, JobState, WorkerProcess
from tasksapp.engine.services import job_cancel
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.engine.worker.lease_keeper import lease_keeper
from tests.factories import JobFactory
from tests.handlers.recording import KEYED_EFFECTS_TABLE, STARTED_TABLE
from tests.processes.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
DELIVERIES = ["transactional", "at_least_once", "at_most_once"]
UNTIL_CANCELLED = "tests.handlers.recording.record_until_cancelled"
SNOOZE = "tests.handlers.recording.snooze_then_record"


@pytest.fixture
def tables():
    with connection.cursor() as cursor:
        cursor.execute(KEYED_EFFECTS_TABLE)
        cursor.execute(STARTED_TABLE)
        cursor.execute("TRUNCATE test_keyed_effects, test_started")


def count(table: str, job_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table} WHERE job_id = %s", [job_id])  # noqa: S608
        return cursor.fetchone()[0]


def claim(job: Job) -> list[list]:
    claims = job_claim_due(ids=[job.id], owner="d", ttl=10)
    return [[c.id, c.token, c.run_at_ms] for c in claims]


def test_a_job_cancelled_after_its_claim_never_runs_its_handler(tables):
    job = JobFactory(handler=UNTIL_CANCELLED, payload={"block": 0})
    message = claim(job)
    assert job_cancel(job_id=job.id).state == JobState.CLAIMED
    assert execute_batch(message) == 1
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.attempts == 1
    assert job.finished_at is not None and job.lease_expires_at is None
    assert count("test_started", job.id) == 0


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_a_running_handler_learns_of_the_cancel_at_the_lease_renewal(tables, delivery):
    job = JobFactory(handler=UNTIL_CANCELLED, delivery=delivery, payload={"block": 60})
    message = claim(job)
    worker = threading.Thread(target=execute_batch, args=(message,))
    worker.start()
    wait_for(lambda: count("test_started", job.id), timeout=20, message="handler running")
    job_cancel(job_id=job.id)
    worker.join(timeout=30)  # the renewal comes every third of the 6 s lease
    assert not worker.is_alive()
    job.refresh_from_db()
    assert (job.state, job.attempts, job.errors) == (JobState.CANCELLED, 1, [])
    assert job.started_at is not None and job.finished_at >= job.started_at
    # transactional: the effect rolled back with the handler's transaction
    assert count("test_keyed_effects", job.id) == (0 if delivery == "transactional" else 1)


def test_a_handler_that_finishes_before_it_checks_succeeds(tables):
    job = JobFactory(handler=UNTIL_CANCELLED, payload={"block": 0})
    message = claim(job)
    execute_batch(message)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    with pytest.raises(Exception, match="only scheduled, failed, claimed or running"):
        job_cancel(job_id=job.id)


def test_a_snooze_gives_back_the_attempt_and_is_in_the_history(tables):
    job = JobFactory(handler=SNOOZE, payload={"snoozes": 1, "seconds": 30}, max_attempts=1)
    before = timezone.now()
    execute_batch(claim(job))
    job.refresh_from_db()
    assert (job.state, job.attempts, job.errors) == (JobState.SCHEDULED, 0, [])
    assert before + dt.timedelta(seconds=30) <= job.run_at
    assert job.run_at <= timezone.now() + dt.timedelta(seconds=30)
    (entry,) = job.history
    assert (entry["event"], entry["attempt"], entry["seconds"]) == ("snoozed", 1, 30.0)
    assert count("test_keyed_effects", job.id) == 0  # rolled back with the snooze

    Job.objects.filter(id=job.id).update(run_at=timezone.now())
    execute_batch(claim(job))
    job.refresh_from_db()
    # one attempt allowed, and it is still there for the run after the snooze
    assert (job.state, job.attempts) == (JobState.SUCCEEDED, 1)
    assert count("test_keyed_effects", job.id) == 1


def test_a_snooze_or_a_cancel_as_asked_counts_as_no_failed_attempt_on_the_worker(tables):
    snoozing = JobFactory(handler=SNOOZE, payload={"snoozes": 1, "seconds": 30})
    cancelled = JobFactory(handler=SNOOZE)
    claimed = claim(snoozing) + claim(cancelled)
    job_cancel(job_id=cancelled.id)  # after its claim: its start finds the request
    execute_batch(claimed)
    keeper = lease_keeper()
    keeper._renew_and_beat()  # the heartbeat writes the counts, as its thread does
    states = dict(Job.objects.values_list("id", "state"))
    assert (states[snoozing.id], states[cancelled.id]) == (JobState.SCHEDULED, JobState.CANCELLED)
    row = WorkerProcess.objects.get(name=keeper.name)
    assert (row.succeeded, row.failed) == (0, 0)


def test_a_snooze_out_of_bounds_is_a_failed_attempt_that_says_why(tables):
    job = JobFactory(handler=SNOOZE, payload={"bad": -5}, max_attempts=1)
    execute_batch(claim(job))
    job.refresh_from_db()
    assert job.state == JobState.DEAD and job.history is None
    assert "seconds must be a number between 0 and" in job.last_error


@pytest.mark.parametrize("seconds", [-1, True, "5", math.nan, math.inf, MAX_SNOOZE_SECONDS + 1])
def test_snooze_seconds_are_checked(seconds):
    with pytest.raises(ValueError, match="Snooze\\(seconds\\)"):
        Snooze(seconds)


def test_a_job_cancelled_while_it_snoozed_is_cancelled_at_once(tables):
    job = JobFactory(handler=SNOOZE, payload={"snoozes": 1, "seconds": 30})
    execute_batch(claim(job))
    assert job_cancel(job_id=job.id).state == JobState.CANCELLED
