"""A failed attempt keeps its traceback: bounded, in its entry of the job's `errors`,
logged by the worker, shown on the job's page and in the API's job detail."""

from __future__ import annotations

import logging

import pytest
from django.utils import timezone

from tasksapp.engine.handlers import job_handler
from tasksapp.engine.models import Job, JobState
from tasksapp.engine.store import PostgresJobStore, SqliteJobStore
from tasksapp.engine.store.rows import FailedAttempt
from tasksapp.engine.transitions import (
    TRACEBACK_CUT,
    TRACEBACK_MAX_CHARS,
    job_claim_due,
    job_fail,
    job_start,
    traceback_tail,
)
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.engine.worker.outcomes import STACK_AT_LIMIT, TRACEBACK_FRAMES
from tests.factories import JobFactory
from tests.web.dashboard.fixtures import (  # noqa: F401 - fixtures
    roles,
    viewer,
    viewer_api,
    viewer_client,
)

pytestmark = pytest.mark.django_db(transaction=True)
HERE = __name__


def _inner_helper(n):
    raise KeyError(f"no such order {n}")


@job_handler
def fails_inside(ctx):
    _inner_helper(ctx.payload.get("n", 7))


def _ping(depth):
    if depth == 0:
        raise RecursionError("bottom reached")
    return _pong(depth - 1)


def _pong(depth):  # two functions in turn: no frame repeats the one before it
    return _ping(depth - 1)


@job_handler
def fails_deep(ctx):
    _ping(int(ctx.payload["depth"]))


@job_handler
def fails_loudly(ctx):
    raise ValueError("x" * int(ctx.payload["chars"]))


@job_handler
def fails_chained(ctx):
    try:
        {}["missing"]
    except KeyError as exc:
        raise RuntimeError("lookup failed") from exc


def _run(job):
    claims = job_claim_due(ids=[job.id], owner="d", ttl=10)
    execute_batch([[c.id, c.token, c.run_at_ms] for c in claims])
    job.refresh_from_db()
    return job


def _failed(handler, max_attempts=3, **payload):
    return _run(JobFactory(handler=f"{HERE}.{handler}", payload=payload, max_attempts=max_attempts))


def test_a_failed_attempt_keeps_its_traceback_in_its_error_entry():
    job = _failed("fails_inside")
    assert job.state == JobState.FAILED
    (entry,) = job.errors
    assert entry["error"] == job.last_error == "KeyError: 'no such order 7'"
    trace = entry["traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert "in fails_inside" in trace and "in _inner_helper" in trace
    assert trace.rstrip().endswith("KeyError: 'no such order 7'")


def test_every_attempt_keeps_its_own_traceback():
    job = _failed("fails_inside", n=1)
    Job.objects.filter(id=job.id).update(run_at=timezone.now(), payload={"n": 2})
    job = _run(job)
    assert [e["attempt"] for e in job.errors] == [1, 2]
    assert "order 1" in job.errors[0]["traceback"] and "order 2" in job.errors[1]["traceback"]


def test_a_chained_exception_keeps_its_cause():
    trace = _failed("fails_chained").errors[0]["traceback"]
    assert "KeyError: 'missing'" in trace
    assert "The above exception was the direct cause" in trace
    assert trace.rstrip().endswith("RuntimeError: lookup failed")


def test_a_deep_traceback_keeps_its_innermost_frames_only():
    trace = _failed("fails_deep", depth=400).errors[0]["traceback"]
    assert trace.count('  File "') == TRACEBACK_FRAMES
    assert "in _pong" in trace and "in fails_deep" not in trace
    assert trace.rstrip().endswith("RecursionError: bottom reached")


def test_a_long_traceback_keeps_its_end_within_the_bound():
    job = _failed("fails_loudly", chars=50_000)
    trace = job.errors[0]["traceback"]
    assert len(trace) <= TRACEBACK_MAX_CHARS
    assert trace.startswith("[… ") and trace.endswith("x" * 100 + "\n")
    assert len(job.last_error) <= 4000  # the error message has its own, smaller bound


def test_the_worker_logs_the_failure_with_its_traceback(caplog):
    with caplog.at_level(logging.WARNING, logger="tasksapp.engine.worker.executor"):
        job = _failed("fails_inside")
    (record,) = [r for r in caplog.records if "attempt 1 failed" in r.getMessage()]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert f"job {job.id}: attempt 1 failed: KeyError" in message
    assert job.errors[0]["traceback"].rstrip("\n") in message


def test_a_time_limit_keeps_the_stack_where_the_handler_was():
    job = JobFactory(
        handler="tests.handlers.recording.record_slowly",
        payload={"seconds": 0.5},
        time_limit=0.05,
        max_attempts=1,
    )
    job = _run(job)
    assert job.state == JobState.DEAD
    (entry,) = job.errors
    assert entry["kind"] == "time_limit" and "still running" in entry["error"]
    stack = entry["traceback"]
    assert stack.startswith(STACK_AT_LIMIT)
    assert stack.count('  File "') <= TRACEBACK_FRAMES
    assert "in record_slowly" in stack and "time.sleep" in stack


def test_a_failure_without_an_exception_has_no_traceback():
    job = JobFactory(handler="tests.handlers.recording.noop", max_attempts=1)
    (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)
    (started,) = job_start(claims=[(claim.id, claim.token)], worker="w", ttl=10)
    assert job_fail(job_id=job.id, token=started.token, error="gone", kind="x", retry_in=None)
    job.refresh_from_db()
    assert "traceback" not in job.errors[0]


def test_a_success_stores_no_errors():
    job = _run(JobFactory(handler="tests.handlers.recording.noop"))
    assert job.state == JobState.SUCCEEDED and job.errors == []


@pytest.mark.parametrize("store_class", [PostgresJobStore, SqliteJobStore], ids=["pg", "orm"])
@pytest.mark.parametrize("trace", ["Traceback (most recent call last):\n  boom\n", None])
def test_both_stores_write_the_traceback_key_only_when_given(store_class, trace):
    store = store_class()
    job = JobFactory()
    (claim,) = store.claim_due(ids=[job.id], owner="d", ttl=10, lead=1.0)
    (started,) = store.start(claims=[(job.id, claim.token)], worker="w", ttl=5, lead=1.0)
    attempt = FailedAttempt(job.id, started.token, JobState.DEAD, "boom", "exception", None, None)
    assert store.fail(FailedAttempt(**{**vars(attempt), "traceback": trace}))
    job.refresh_from_db()
    (entry,) = job.errors
    assert entry.get("traceback", "absent") == (trace if trace else "absent")
    assert entry["error"] == "boom" and job.last_error == "boom"


def test_traceback_tail_keeps_the_end_and_says_what_it_cut():
    short = "Traceback\n" * 10
    assert traceback_tail(short) == short
    text = "".join(f"line {i}\n" for i in range(5000))
    kept = traceback_tail(text)
    assert len(kept) <= TRACEBACK_MAX_CHARS and kept.endswith("line 4999\n")
    marker, rest = kept.split("\n", 1)
    cut = int(marker.removeprefix("[… ").split(" ")[0])
    assert marker + "\n" == TRACEBACK_CUT.format(n=cut)
    assert cut + len(rest) == len(text)  # the marker counts exactly what is gone


def test_the_job_page_shows_each_traceback_folded(viewer_client):  # noqa: F811
    job = _failed("fails_inside")
    page = viewer_client.get(f"/jobs/{job.id}/").content.decode()
    assert '<details class="traceback"><summary>Traceback</summary><pre>' in page
    assert "in _inner_helper" in page
    assert "KeyError: &#x27;no such order 7&#x27;" in page


def test_the_api_job_detail_has_each_traceback(viewer_api):  # noqa: F811
    job = _failed("fails_inside")
    body = viewer_api.get(f"/api/jobs/{job.id}/").json()
    assert body["errors"][0]["traceback"] == job.errors[0]["traceback"]
