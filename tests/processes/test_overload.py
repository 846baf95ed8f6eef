"""Overload: more work due than the workers can start within a claim's lifetime.

A claim waits in the broker while the workers are busy; it must not be wasted for that
(returned, claimed again and sent again behind the queue, while the first message starts
nothing when it is read at last). Every job runs once, and the work spent on returned and
re-claimed jobs stays a small fraction of the jobs run.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.processes.support import effect_counts, insert_jobs, outcome, wait_for

pytestmark = pytest.mark.processes
CLAIM_TTL_S = 4.0  # TEMPO_CLAIM_TTL_SECONDS of the test cluster


def _claims(sql) -> int:
    """Claims made in all (each claim raises a job's token by one)."""
    return sql.execute("SELECT coalesce(sum(lease_token), 0) FROM tasksapp_job").fetchone()[0]


def _workers_ready(sql, count: int = 1):
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0] >= count,
        timeout=40,
        message="workers ready",
    )


def _all_succeeded(sql, total: int, *, timeout: float) -> None:
    wait_for(
        lambda: outcome(sql).get("succeeded", 0) == total,
        timeout=timeout,
        interval=0.5,
        message=f"{total} jobs succeeded",
    )


def test_slow_handlers_backlog_runs_every_job_once_without_reclaiming(cluster, sql):
    """Jobs due at once that take the two slots ~15 s, ~4 claim lifetimes: the later
    messages wait in the queue far longer than a claim lives."""
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=2)
    _workers_ready(sql)
    total = 100
    slow = "tests.handlers.recording.record_slowly"
    insert_jobs(sql, count=total, start=1, spread=0.1, handler=slow)
    sql.execute("UPDATE tasksapp_job SET payload = '{\"seconds\": 0.3}'")
    _all_succeeded(sql, total, timeout=120)
    counts = effect_counts(sql)
    assert len(counts) == total and set(counts.values()) == {1}
    reclaimed = _claims(sql) - total
    print(f"claims beyond one per job: {reclaimed}")
    assert reclaimed <= total * 0.05


def test_a_worker_stopped_for_three_claim_lifetimes_loses_and_doubles_nothing(cluster, sql):
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=2)
    _workers_ready(sql)
    cluster.kill("w1", signal.SIGSTOP)
    total = 200
    try:
        insert_jobs(sql, count=total, start=0.5, spread=2)
        time.sleep(3 * CLAIM_TTL_S)
    finally:
        cluster.kill("w1", signal.SIGCONT)
    _all_succeeded(sql, total, timeout=60)
    counts = effect_counts(sql)
    assert len(counts) == total and set(counts.values()) == {1}
    reclaimed = _claims(sql) - total
    print(f"claims beyond one per job: {reclaimed}")
    assert reclaimed <= total * 0.05
