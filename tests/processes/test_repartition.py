"""Changing TEMPO_PARTITIONS on a running system, as a rolling restart does it: new
dispatchers start with the new count beside old ones, then the old ones stop. Every
instance works with the largest count announced, so at no moment do two instances read
one partition number as different sets of jobs for longer than a round; every job runs
once, none early."""

import signal

import pytest

from tests.processes.support import (
    PARTITION_LOCK_CLASS,
    effect_counts,
    insert_jobs,
    outcome,
    wait_for,
)

pytestmark = pytest.mark.processes

COUNT_CLASS = 7_316_003  # tasksapp.engine.cluster.sql.PARTITION_COUNT_CLASS


def partitions_in_use(conn) -> tuple[int | None, int]:
    """(the largest count announced, how many partition locks are held)."""
    return conn.execute(
        "SELECT max(objid::int) FILTER (WHERE classid = %s),"
        " count(*) FILTER (WHERE classid = %s) FROM pg_locks"
        " WHERE locktype = 'advisory' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        [COUNT_CLASS, PARTITION_LOCK_CLASS],
    ).fetchone()


def stop(cluster, name: str) -> None:
    cluster.kill(name, signal.SIGTERM)
    cluster.processes[name].wait(timeout=30)


def test_a_rolling_change_of_the_partition_count_runs_every_job_once(cluster, sql):
    cluster.dispatcher("d1")
    cluster.dispatcher("d2")
    cluster.worker("w1", concurrency=8)
    wait_for(lambda: partitions_in_use(sql) == (16, 16), timeout=30, message="16 in use")
    insert_jobs(sql, count=300, start=1, spread=20)  # due all through the rolling change

    cluster.env["TEMPO_PARTITIONS"] = "32"  # the new release's setting
    cluster.dispatcher("d3")
    wait_for(lambda: partitions_in_use(sql) == (32, 32), timeout=30, message="32 in use")
    stop(cluster, "d1")
    cluster.dispatcher("d4")
    stop(cluster, "d2")
    wait_for(lambda: outcome(sql) == {"succeeded": 300}, timeout=120, message="all 300 succeeded")

    cluster.env["TEMPO_PARTITIONS"] = "16"  # and back down
    cluster.dispatcher("d5")
    stop(cluster, "d3")
    assert partitions_in_use(sql)[0] == 32  # d4 still announces 32: everyone keeps it
    stop(cluster, "d4")
    wait_for(lambda: partitions_in_use(sql) == (16, 16), timeout=30, message="16 again")
    insert_jobs(sql, count=50, start=0.5, spread=5)
    wait_for(lambda: outcome(sql) == {"succeeded": 350}, timeout=60, message="all 350 succeeded")

    counts = effect_counts(sql)
    assert len(counts) == 350 and set(counts.values()) == {1}
    early = sql.execute("SELECT count(*) FROM tasksapp_job WHERE started_at < run_at")
    assert early.fetchone()[0] == 0
    attempts = sql.execute("SELECT max(attempts) FROM tasksapp_job").fetchone()[0]
    assert attempts == 1
    worst = sql.execute(
        "SELECT max(extract(epoch FROM started_at - run_at)) FROM tasksapp_job"
    ).fetchone()[0]
    print(f"rolling partition count change 16 -> 32 -> 16: worst start lag {worst:.2f} s")
    assert worst < 10  # a round or two of re-partitioning, with slack for a loaded machine
