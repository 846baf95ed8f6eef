"""Idempotent creation tells the truth: of concurrent creators with one key exactly one
is answered 201 and the others 200 with the same job; the key with other parameters is
a 409 naming the stored job."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from tasksapp.engine.models import Job
from tasksapp.engine.services import IdempotencyConflict, job_schedule, job_schedule_or_get
from tasksapp.graphs.models import GraphRun
from tests.web.dashboard.fixtures import HANDLER

JOBS = "/api/jobs/"
GRAPH_JOBS = "/api/graph-jobs/"
CALLERS = 20


def _when(**delta) -> str:
    return (timezone.now() + dt.timedelta(**(delta or {"hours": 1}))).isoformat()


def _at_once(count: int, call) -> list:
    """Run ``call`` on ``count`` threads released together; each thread has its own
    database session, so the inserts really race in PostgreSQL."""
    barrier, answers, lock = threading.Barrier(count), [], threading.Lock()

    def run() -> None:
        try:
            barrier.wait(timeout=30)
            answer = call()
            with lock:
                answers.append(answer)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return answers


@pytest.mark.django_db(transaction=True)
def test_concurrent_posts_with_one_key_create_one_job_and_one_201(operator):
    body = {"handler": HANDLER, "run_at": _when(), "payload": {"n": 1}, "idempotency_key": "k1"}

    def post():
        client = APIClient()
        client.force_authenticate(user=operator)
        response = client.post(JOBS, body, format="json")
        return response.status_code, response.json()["id"]

    answers = _at_once(CALLERS, post)
    assert len(answers) == CALLERS
    assert sorted(code for code, _ in answers) == [200] * (CALLERS - 1) + [201]
    assert {job_id for _, job_id in answers} == {Job.objects.get().id}


@pytest.mark.django_db(transaction=True)
def test_concurrent_service_calls_with_one_key_agree_on_one_job():
    run_at = timezone.now() + dt.timedelta(hours=1)

    def schedule():
        job, created = job_schedule_or_get(handler=HANDLER, run_at=run_at, idempotency_key="k2")
        return job.id, created

    answers = _at_once(CALLERS, schedule)
    assert sum(created for _, created in answers) == 1
    assert {job_id for job_id, _ in answers} == {Job.objects.get().id}


@pytest.mark.django_db
def test_the_same_key_with_another_payload_is_a_409_with_the_stored_job(operator_api):
    first = operator_api.post(
        JOBS,
        {"handler": HANDLER, "run_at": _when(), "payload": {"n": 1}, "idempotency_key": "k"},
        format="json",
    )
    assert first.status_code == 201
    again = operator_api.post(
        JOBS,
        {"handler": HANDLER, "run_at": _when(), "payload": {"n": 2}, "idempotency_key": "k"},
        format="json",
    )
    assert again.status_code == 409
    assert again.json()["job_id"] == first.json()["id"]
    assert "payload" in again.json()["detail"]
    assert Job.objects.get().payload == {"n": 1}


@pytest.mark.django_db
def test_the_same_request_a_moment_later_is_the_same_job(operator_api):
    """run_at is not part of a job's identity: callers compute it from the clock."""
    body = {"handler": HANDLER, "payload": {"n": 1}, "idempotency_key": "k"}
    first = operator_api.post(JOBS, {**body, "run_at": _when(hours=1)}, format="json")
    again = operator_api.post(JOBS, {**body, "run_at": _when(hours=1, seconds=3)}, format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["run_at"] == first.json()["run_at"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        {"handler": "tests.handlers.recording.noop"},
        {"max_attempts": 2},
        {"delivery": "at_least_once"},
        {"retry_policy": {"delays": [1]}},
        {"time_limit": 5},
    ],
)
def test_the_service_refuses_the_key_with_other_options(change):
    run_at = timezone.now() + dt.timedelta(hours=1)
    first = job_schedule(handler=HANDLER, run_at=run_at, idempotency_key="k")
    with pytest.raises(IdempotencyConflict) as raised:
        job_schedule(**{"handler": HANDLER, "run_at": run_at, "idempotency_key": "k", **change})
    assert raised.value.job_id == first.id
    assert str(raised.value).startswith(f"idempotency_key 'k' is taken by job {first.id} ")
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_graph_posts_with_one_key_create_one_graph_and_one_201(operator):
    body = {"has": {"user_id": 7, "latency_scale": 0, "failure_rate": 0}, "wants": ["friends"]}
    body["idempotency_key"] = "g1"

    def post():
        client = APIClient()
        client.force_authenticate(user=operator)
        response = client.post(GRAPH_JOBS, body, format="json")
        return response.status_code

    codes = _at_once(8, post)
    assert GraphRun.objects.count() == 1
    assert sorted(codes) == [200] * 7 + [201]
