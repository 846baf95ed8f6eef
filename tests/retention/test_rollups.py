"""Rollups agree with the raw rows where both exist, and keep the dashboard's history,
the recurring task's history and /metrics after the rows are gone."""

from __future__ import annotations

import datetime as dt
import math
import random

import pytest
from django.utils import timezone

from tasksapp.engine.models import Job
from tasksapp.retention.history import job_history
from tasksapp.retention.models import HOUR, LAG_BOUNDS_MS, MINUTE, JobRollup
from tasksapp.retention.services import retention_run, rollup_write
from tasksapp.retention.store import bucket_start, lag_bucket
from tasksapp.web.selectors.dashboard import (
    job_history_by_day,
    job_throughput,
    jobs_finished_by_state,
)

STATES = ("succeeded", "succeeded", "succeeded", "dead", "cancelled", "lost", "failed")
TASK = 77


def _finished_jobs(now: dt.datetime, count: int = 300) -> list[Job]:
    """Jobs that finished over the last three hours, with lags from 0.3 ms to 90 s."""
    rng = random.Random(13)
    jobs = []
    for n in range(count):
        finished = now - dt.timedelta(seconds=rng.uniform(60, 3 * 3600))
        lag = dt.timedelta(milliseconds=rng.choice([0.3, 3, 7, 40, 400, 3000, 90_000]))
        run_at = finished - dt.timedelta(seconds=5)
        attempts = rng.choice([1, 1, 2, 3])
        jobs.append(
            Job(
                handler="tests.handlers.recording.record",
                payload={"recurring_task_id": TASK, "occurrence": 1} if n % 3 == 0 else {},
                run_at=run_at,
                started_at=run_at + lag,
                finished_at=finished,
                state=rng.choice(STATES),
                attempts=attempts,
                errors=[{"attempt": a} for a in range(attempts - 1)],
                idempotency_key=f"r{n}",
            )
        )
    return Job.objects.bulk_create(jobs)


def _raw(jobs: list[Job], span: int, task_id: int | None = None) -> dict:
    """What the rollups must say, computed from the rows themselves."""
    counts: dict[tuple, int] = {}
    lags: dict[dt.datetime, list[float]] = {}
    for job in jobs:
        if task_id is not None and job.payload.get("recurring_task_id") != task_id:
            continue
        bucket = bucket_start(job.finished_at, span)
        counts[(bucket, job.state)] = counts.get((bucket, job.state), 0) + 1
        if job.state in ("succeeded", "dead"):
            lag_ms = (job.started_at - job.run_at).total_seconds() * 1000
            lags.setdefault(bucket, []).append(lag_ms)
    return {"counts": counts, "lags": lags}


def _read(now: dt.datetime, span: int, task_id: int | None = None) -> dict:
    history = job_history(since=now - dt.timedelta(hours=4), until=now, span=span, task_id=task_id)
    counts = {(b.start, state): n for b in history for state, n in b.jobs.items() if n}
    return {"counts": counts, "buckets": {b.start: b for b in history}}


def _assert_agree(raw: dict, read: dict) -> None:
    assert read["counts"] == raw["counts"]
    for bucket, lags in raw["lags"].items():
        histogram = read["buckets"][bucket]
        assert histogram.lag_count == len(lags)
        ordered = sorted(lags)
        for q in (0.5, 0.95, 0.99):
            # The exact percentile (percentile_cont) lies between two ranks' lags; the
            # histogram's estimate lies within the buckets of those two lags.
            position = q * (len(ordered) - 1)
            below, above = ordered[math.floor(position)], ordered[math.ceil(position)]
            estimate = histogram.lag_percentile(q)
            assert _bucket_low(below) <= estimate <= _bucket_high(above), (q, below, estimate)


def _bucket_low(lag_ms: float) -> float:
    index = lag_bucket(lag_ms)
    return LAG_BOUNDS_MS[index - 1] if index else 0.0


def _bucket_high(lag_ms: float) -> float:
    return LAG_BOUNDS_MS[min(lag_bucket(lag_ms), len(LAG_BOUNDS_MS) - 1)]


@pytest.mark.django_db
@pytest.mark.parametrize("span", [MINUTE, HOUR])
def test_rollups_agree_with_the_rows_before_during_and_after_rolling_up(retention, store, span):
    now = timezone.now()
    jobs = _finished_jobs(now)
    raw = _raw(jobs, span)
    _assert_agree(raw, _read(now, span))  # nothing rolled up: all from the rows

    rollup_write(now=now - dt.timedelta(minutes=97))  # part rollups, part rows
    assert JobRollup.objects.filter(span=span).exists()
    _assert_agree(raw, _read(now, span))

    rollup_write(now=now)  # everything rolled up, rows still there
    _assert_agree(raw, _read(now, span))
    _assert_agree(_raw(jobs, span, TASK), _read(now, span, TASK))


@pytest.mark.django_db
def test_the_dashboard_history_and_metrics_survive_the_removal_of_the_rows(retention, store):
    retention.update(
        {f"{s.upper()}_DAYS": 0.0001 for s in ("succeeded", "cancelled", "dead", "lost")}
    )
    now = timezone.now()
    _finished_jobs(now)
    before = {
        "throughput": job_throughput(since=now - dt.timedelta(hours=1), until=now),
        "days": job_history_by_day(now=now),
        "task": job_history_by_day(now=now, task_id=TASK),
        "metrics": jobs_finished_by_state(now=now),
        "hours": _read(now, HOUR)["counts"],
    }
    report = retention_run(now=now)
    assert report.removed["jobs"] > 200
    assert set(Job.objects.values_list("state", flat=True)) == {"failed"}  # can still run

    after = {
        "throughput": job_throughput(since=now - dt.timedelta(hours=1), until=now),
        "days": job_history_by_day(now=now),
        "task": job_history_by_day(now=now, task_id=TASK),
        "metrics": jobs_finished_by_state(now=now),
        "hours": _read(now, HOUR)["counts"],
    }
    assert after == before
    assert sum(before["days"]["succeeded"]) > 0 and sum(before["task"]["succeeded"]) > 0
    assert len(before["days"]["days"]) == 90


@pytest.mark.django_db
def test_rolling_up_twice_counts_each_finish_once(retention, store):
    now = timezone.now()
    jobs = _finished_jobs(now, count=40)
    rollup_write(now=now)
    rollup_write(now=now)
    total = sum(JobRollup.objects.filter(span=HOUR).values_list("jobs", flat=True))
    assert total == len(jobs)
