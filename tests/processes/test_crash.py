"""Crash claims proven with real processes: SIGKILL, duplicates, exactly-once effects."""

import signal
import time

import pytest

from tests.processes.support import effect_counts, insert_jobs, outcome, wait_for

pytestmark = pytest.mark.processes


def test_jobs_survive_a_killed_dispatcher_and_a_killed_worker(cluster, sql):
    for name in ("d1", "d2", "d3"):
        cluster.dispatcher(name)
    cluster.worker("w1", concurrency=8)
    cluster.worker("w2", concurrency=8)
    insert_jobs(sql, count=2000, start=3, spread=30)
    time.sleep(12)
    cluster.kill("d2", signal.SIGKILL)
    time.sleep(5)
    cluster.kill("w1", signal.SIGKILL)
    wait_for(
        lambda: outcome(sql).get("succeeded") == 2000,
        timeout=90,
        message=f"all 2000 succeeded (now {outcome(sql)})",
    )

    effects = effect_counts(sql)
    assert len(effects) == 2000 and set(effects.values()) == {1}  # exactly once
    early = sql.execute("SELECT count(*) FROM tasksapp_job WHERE started_at < run_at").fetchone()
    assert early[0] == 0
    never_twice = sql.execute(
        "SELECT count(*) FROM tasksapp_job WHERE attempts <> 1 AND last_error = ''"
    ).fetchone()
    assert never_twice[0] == 0


def test_a_job_scheduled_for_now_starts_within_100_ms(cluster, sql):
    cluster.dispatcher("d1")
    cluster.worker("w1")
    wait_for(
        lambda: sql.execute(
            "SELECT count(*) FROM tasksapp_dispatcher WHERE partitions::text <> '[]'"
        ).fetchone()[0],
        timeout=20,
        message="dispatcher owns partitions",
    )
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
        timeout=20,
        message="worker ready",
    )
    lags = []
    for _ in range(5):
        insert_jobs(sql, count=1, start=0, spread=1)
        wait_for(
            lambda: outcome(sql).get("scheduled", 0) + outcome(sql).get("claimed", 0) == 0,
            timeout=10,
            interval=0.02,
            message="job started",
        )
        time.sleep(0.2)
    lags = [
        row[0]
        for row in sql.execute(
            "SELECT extract(epoch FROM started_at - run_at) FROM tasksapp_job"
        ).fetchall()
    ]
    assert len(lags) == 5
    assert sorted(lags)[2] < 0.1, lags  # the median; bench/lag measures it precisely
    assert max(lags) < 0.5, lags


def test_graceful_sigterm_leaves_no_job_claimed_by_the_stopped_dispatcher(cluster, sql):
    cluster.dispatcher("d1")
    cluster.worker("w1")
    insert_jobs(sql, count=300, start=3, spread=6)
    time.sleep(5)
    cluster.kill("d1", signal.SIGTERM)
    assert cluster.processes["d1"].wait(timeout=10) == 0
    time.sleep(1)  # the worker starts what was already handed to it
    stuck = sql.execute(
        "SELECT count(*) FROM tasksapp_job WHERE state = 'claimed' AND claimed_by = 'd1'"
    ).fetchone()[0]
    assert stuck == 0
    stopped = sql.execute(
        "SELECT stopped_at IS NOT NULL, partitions::text FROM tasksapp_dispatcher WHERE name = 'd1'"
    ).fetchone()
    assert stopped == (True, "[]")
    cluster.dispatcher("d2")
    wait_for(
        lambda: outcome(sql).get("succeeded") == 300,
        timeout=30,
        message=f"a new dispatcher finishes the rest ({outcome(sql)})",
    )
    assert set(effect_counts(sql).values()) == {1}


def test_a_duplicated_message_does_not_start_a_job_twice(cluster, sql):
    from schedapp.celery import app
    from tasksapp.engine.worker.tasks import RUN_JOBS

    insert_jobs(sql, count=1, start=-0.1, spread=1)
    (job_id,) = sql.execute("SELECT id FROM tasksapp_job").fetchone()
    token, run_at_ms = sql.execute(
        "UPDATE tasksapp_job SET state = 'claimed', lease_token = lease_token + 1,"
        " lease_expires_at = clock_timestamp() + interval '30 seconds'"
        " RETURNING lease_token, floor(extract(epoch FROM run_at) * 1000)::bigint"
    ).fetchone()
    app.conf.broker_url = cluster.env["CELERY_BROKER_URL"]
    for _ in range(3):
        app.send_task(RUN_JOBS, args=[[[job_id, token, run_at_ms]]], queue=cluster.queue)
    cluster.worker("w1")
    wait_for(lambda: outcome(sql).get("succeeded") == 1, timeout=20, message="job succeeded")
    time.sleep(1)
    assert effect_counts(sql) == {job_id: 1}
    assert sql.execute("SELECT attempts FROM tasksapp_job").fetchone()[0] == 1
