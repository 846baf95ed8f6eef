"""Stalls, not deaths: a worker frozen (SIGSTOP) past its lease, then thawed (SIGCONT).

The job is handed to another worker when the frozen one's lease expires; when the frozen
worker wakes up and finishes its handler, the fence refuses its late outcome and its
transactional effects roll back: one effect in all, two attempts, the first recorded as
`lease_expired`.
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
    assert (state, attempts) == ("succeeded", 2)
    assert owner != first_owner
    assert [e["kind"] for e in errors] == ["lease_expired"]
    assert taken_over_after < TAKE_OVER_BOUND_S
    print(f"taken over and finished {taken_over_after:.1f} s after the freeze")
    # w1 wakes up, finishes its handler and tries to record it: refused, rolled back.
    wait_for(
        lambda: "lease lost" in cluster.log("w1"),
        timeout=15,
        message="the thawed worker's outcome refused",
    )
    assert effect_counts(sql) == {job_id: 1}
    assert _job(sql)[1:3] == ("succeeded", 2)
