"""Stalls, not deaths: a worker frozen (SIGSTOP) past its lease, then thawed (SIGCONT).

The job is handed to another worker when the frozen one's lease expires; when the frozen
worker wakes up and finishes its handler, the fence refuses its late outcome and its
transactional effects roll back: one effect in all, one attempt counted, the frozen run
recorded as `lost_run` (it committed nothing, so its attempt was given back).
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.processes.support import effect_counts, insert_jobs, wait_for

pytestmark = pytest.mark.processes
LEASE_S = 3.0  # TEMPO_RUN_LEASE_SECONDS of the test cluster
TAKE_OVER_BOUND_S = 20.0  # lease (3 s) + the reaper's round + the second run, with slack


def _job(sql) -> tuple:
    return sql.execute(
        "SELECT id, state, attempts, claimed_by, errors FROM tasksapp_job"
    ).fetchone()


def test_a_frozen_workers_job_runs_once_elsewhere_and_its_late_outcome_is_refused(cluster, sql):
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=1)
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
        timeout=30,
        message="w1 ready",
    )
    insert_jobs(sql, count=1, start=1, spread=0.1, handler="tests.handlers.recording.record_slowly")
    sql.execute("UPDATE tasksapp_job SET payload = '{\"seconds\": 3}'")
    wait_for(lambda: _job(sql)[1] == "running", timeout=20, message="job running on w1")
    first_owner = _job(sql)[3]
    cluster.kill("w1", signal.SIGSTOP)  # frozen mid-handler, its lease no longer renewed
    frozen_at = time.monotonic()
    try:
        time.sleep(LEASE_S + 1)
        cluster.worker("w2", concurrency=1)
        wait_for(
            lambda: _job(sql)[1] == "succeeded",
            timeout=TAKE_OVER_BOUND_S + 10,
            message="the job taken over and finished by w2",
        )
        taken_over_after = time.monotonic() - frozen_at
    finally:
        cluster.kill("w1", signal.SIGCONT)
    job_id, state, attempts, owner, errors = _job(sql)
    # A transactional run: the frozen one committed nothing, so its attempt was given back.
    assert (state, attempts) == ("succeeded", 1)
    assert owner != first_owner
    assert [e["kind"] for e in errors] == ["lost_run"]
    assert taken_over_after < TAKE_OVER_BOUND_S
    print(f"taken over and finished {taken_over_after:.1f} s after the freeze")
    # w1 wakes up, finishes its handler and tries to record it: refused, rolled back.
    wait_for(
        lambda: "lease lost" in cluster.log("w1"),
        timeout=15,
        message="the thawed worker's outcome refused",
    )
    assert effect_counts(sql) == {job_id: 1}
    assert _job(sql)[1:3] == ("succeeded", 1)


def _partitions_by_dispatcher(sql) -> dict[str, int]:
    rows = sql.execute("SELECT name, partitions FROM tasksapp_dispatcher").fetchall()
    return {name: len(parts or []) for name, parts in rows}


def test_a_frozen_dispatchers_partitions_are_taken_over_and_it_rejoins(cluster, sql):
    """Frozen past the stall bound (ten coordination rounds: 5 s in the test cluster),
    its session is ended by the survivor, which takes every partition and runs the jobs
    due meanwhile; thawed, the frozen one finds its session gone before it claims, and
    rejoins. Every job runs exactly once."""
    cluster.dispatcher("d1")
    cluster.dispatcher("d2")
    cluster.worker("w1", concurrency=4)
    wait_for(
        lambda: sorted(_partitions_by_dispatcher(sql).values()) == [8, 8],
        timeout=30,
        message="two dispatchers sharing the partitions",
    )
    insert_jobs(sql, count=60, start=2, spread=12, handler="tests.handlers.recording.record")
    time.sleep(1)
    cluster.kill("d1", signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        wait_for(
            lambda: _partitions_by_dispatcher(sql).get("d2") == 16,
            timeout=20,
            message="d2 owning every partition",
        )
        taken_over_after = time.monotonic() - frozen_at
        time.sleep(max(0.0, 14 - (time.monotonic() - frozen_at)))
    finally:
        cluster.kill("d1", signal.SIGCONT)
    wait_for(
        lambda: sql.execute(
            "SELECT count(*) FROM tasksapp_job WHERE state = 'succeeded'"
        ).fetchone()[0]
        == 60,
        timeout=30,
        message="every job succeeded",
    )
    counts = effect_counts(sql)
    assert len(counts) == 60 and set(counts.values()) == {1}
    early, latest = sql.execute(
        "SELECT count(*) FILTER (WHERE started_at < run_at),"
        " extract(epoch FROM max(started_at - run_at)) FROM tasksapp_job"
    ).fetchone()
    assert early == 0
    assert taken_over_after < 15  # 5 s stall bound + a rebalance round or two, with slack
    assert latest < 20  # a job due at the freeze waits for the take-over and its claim TTL
    wait_for(
        lambda: "database error, reconnecting" in cluster.log("d1"),
        timeout=20,
        message="the thawed dispatcher finding its session gone",
    )
    wait_for(
        lambda: sorted(_partitions_by_dispatcher(sql).values()) == [8, 8],
        timeout=30,
        message="the thawed dispatcher rejoining",
    )
    print(f"taken over {taken_over_after:.1f} s after the freeze; latest start {latest:.1f} s")
