"""Handlers that never return, and warm shutdowns, with real worker processes.

A prefork worker (`-P prefork`) ends the child that runs a handler at the handler's time
limit (tasksapp/engine/worker/lease_keeper.py, LeaseKeeper's watchdog); Celery's pool starts
another child, so the slot is free again. The cluster's run lease is 3 s: the child ends
at the limit, before the lease (no longer renewed) can expire and the job be re-claimed.
"""

import signal
import time

import pytest

from tests.handlers.recording import TICKS_TABLE
from tests.processes.support import Cluster, outcome, wait_for

pytestmark = pytest.mark.processes

HANG = "tests.handlers.recording.loop_forever"
TICK = "tests.handlers.recording.tick_until_limit"
SLOW = "tests.handlers.recording.record_slowly"
RECORD = "tests.handlers.recording.record"

# A hung job ends (recorded failed, its child gone) within this many seconds of its
# time limit: the watchdog wakes at the limit; the bound leaves room for a busy machine.
END_BOUND_S = 1.0

INSERT = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors,
    time_limit)
VALUES (%(handler)s, %(payload)s, clock_timestamp() + make_interval(secs => %(start)s),
    'scheduled', 0, %(max_attempts)s, '{"delays": [0]}', %(delivery)s, md5(random()::text),
    0, '', '', '[]', %(time_limit)s)
RETURNING id
"""


def add_job(
    sql,
    handler: str,
    *,
    start: float,
    time_limit: float | None = None,
    delivery: str = "transactional",
    max_attempts: int = 1,
    payload: str = "{}",
) -> int:
    row = sql.execute(
        INSERT,
        {
            "handler": handler,
            "payload": payload,
            "start": start,
            "max_attempts": max_attempts,
            "delivery": delivery,
            "time_limit": time_limit,
        },
    ).fetchone()
    return row[0]


def start_worker(cluster: Cluster, name: str, *, pool: str, concurrency: int = 1):
    return cluster.worker(name, concurrency=concurrency, pool=pool)


def wait_ready(sql) -> None:
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
        timeout=30,
        message="worker ready",
    )


def job_row(sql, job_id: int) -> dict:
    cursor = sql.execute(
        """SELECT state, last_error, errors, attempts,
                  extract(epoch FROM finished_at - started_at) AS ran_s,
                  extract(epoch FROM started_at - run_at) AS lag_s
           FROM tasksapp_job WHERE id = %s""",
        [job_id],
    )
    names = [c.name for c in cursor.description]
    return dict(zip(names, cursor.fetchone(), strict=True))


def leased(sql) -> int:
    return sql.execute(
        "SELECT count(*) FROM tasksapp_job WHERE state IN ('claimed', 'running')"
    ).fetchone()[0]


def test_a_hung_handler_is_ended_at_its_limit_and_the_slot_serves_the_next_job(cluster, sql):
    """The issue's case: a handler that loops for ever, time_limit=2, a worker with one
    slot. The job ends dead with a time-limit error within END_BOUND_S of its limit, and
    a job due 8 s later starts on time (within 1 s)."""
    cluster.dispatcher("d1")
    start_worker(cluster, "w1", pool="prefork")
    wait_ready(sql)
    hung = add_job(sql, HANG, start=1, time_limit=2)
    later = add_job(sql, RECORD, start=9)
    wait_for(lambda: outcome(sql).get("succeeded") == 1, timeout=30, message="the later job")
    row = job_row(sql, hung)
    assert row["state"] == "dead", row
    assert row["last_error"] == (
        "time limit of 2 s exceeded: the handler was still running; its worker process was ended"
    )
    assert row["errors"][-1]["kind"] == "time_limit"
    lag = job_row(sql, later)["lag_s"]
    print(f"hung job ended {row['ran_s']:.3f} s after its begin (limit 2 s); next lag {lag:.3f} s")
    assert 2 <= row["ran_s"] < 2 + END_BOUND_S, row
    assert lag < 1.0
    assert leased(sql) == 0
    assert cluster.processes["w1"].poll() is None  # the worker serves on
    assert "Worker exited prematurely" in cluster.log("w1")  # Celery replaced the child


def test_an_at_least_once_job_past_its_limit_never_runs_twice_at_once(cluster, sql):
    """Attempt 1 ticks for ever, attempt 2 ticks for 0.5 s: every tick of attempt 1 is
    written before the first tick of attempt 2 (both read the database clock)."""
    sql.execute(TICKS_TABLE)
    sql.execute("TRUNCATE test_ticks")
    cluster.dispatcher("d1")
    start_worker(cluster, "w1", pool="prefork", concurrency=2)
    wait_ready(sql)
    job = add_job(sql, TICK, start=1, time_limit=2, delivery="at_least_once", max_attempts=3)
    wait_for(lambda: outcome(sql).get("succeeded") == 1, timeout=30, message="attempt 2")
    spans = dict(
        (attempt, (first, last, pids))
        for attempt, first, last, pids in sql.execute(
            """SELECT attempt, min(at), max(at), array_agg(DISTINCT pid) FROM test_ticks
               WHERE job_id = %s GROUP BY attempt""",
            [job],
        ).fetchall()
    )
    assert sorted(spans) == [1, 2]
    assert spans[1][1] < spans[2][0], spans  # the first run had ended before the second
    row = job_row(sql, job)
    assert row["attempts"] == 2 and row["errors"][0]["kind"] == "time_limit"
    time.sleep(0.5)  # nothing ticks on after the end
    assert (
        sql.execute("SELECT max(at) FROM test_ticks WHERE attempt = 1").fetchone()[0] == spans[1][1]
    )
    assert leased(sql) == 0


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_warm_shutdown_lets_the_job_in_flight_finish(cluster, sql, pool):
    cluster.dispatcher("d1")
    worker = start_worker(cluster, "w1", pool=pool)
    wait_ready(sql)
    job = add_job(sql, SLOW, start=1, payload='{"seconds": 3}')
    wait_for(lambda: job_row(sql, job)["state"] == "running", timeout=20, message="running")
    time.sleep(0.5)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=20)
    assert job_row(sql, job)["state"] == "succeeded"
    assert leased(sql) == 0


def test_a_warm_shutdown_with_a_hung_handler_ends_at_its_limit(cluster, sql):
    """SIGTERM while a handler loops for ever: the child ends at the time limit, the job
    is recorded, the worker stops; nothing is left claimed or running."""
    cluster.dispatcher("d1")
    worker = start_worker(cluster, "w1", pool="prefork")
    wait_ready(sql)
    job = add_job(sql, HANG, start=1, time_limit=2, max_attempts=2)
    wait_for(lambda: job_row(sql, job)["state"] == "running", timeout=20, message="running")
    stopped_at = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=20)
    assert time.monotonic() - stopped_at < 2 + END_BOUND_S + 2  # the limit, then the exit
    row = job_row(sql, job)
    assert row["state"] == "failed" and row["errors"][-1]["kind"] == "time_limit", row
    assert leased(sql) == 0


BATCH = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors,
    time_limit)
SELECT h.handler, '{}',
    statement_timestamp() + make_interval(secs => 3 - CASE WHEN h.n = 1 THEN 0.0002 ELSE 0 END),
    'scheduled', 0, 1, '{"delays": [0]}', 'transactional', md5(random()::text || h.n), 0, '',
    '', '[]', 2
FROM unnest(%(handlers)s::text[]) WITH ORDINALITY AS h(handler, n)
ORDER BY h.n
"""


def test_a_hung_handler_s_batch_is_recorded_or_handed_back(
    db_url, broker_url, queue_name, sql, tmp_path
):
    """One message holds the hung job and three others (fan-out 1): the child ends at the
    hung one's limit, and each other job runs exactly once, its attempt counted once —
    recorded before the end, or handed back unbegun and run by the next child."""
    cluster = Cluster(
        database_url=db_url,
        broker_url=broker_url,
        queue=queue_name,
        logs=tmp_path,
        TEMPO_TUNING_FANOUT="1",
    )
    try:
        cluster.dispatcher("d1")
        start_worker(cluster, "w1", pool="prefork")
        wait_ready(sql)
        sql.execute(BATCH, {"handlers": [HANG, RECORD, RECORD, RECORD]})
        wait_for(lambda: outcome(sql).get("succeeded") == 3, timeout=30, message="the others")
        rows = sql.execute(
            "SELECT handler, state, attempts, errors FROM tasksapp_job ORDER BY id"
        ).fetchall()
        effects = dict(sql.execute("SELECT job_id, count(*) FROM test_effects GROUP BY job_id"))
        ids = [r[0] for r in sql.execute("SELECT id FROM tasksapp_job ORDER BY id")]
        handed_back = [line for line in cluster.log("w1").splitlines() if "handed back" in line]
        print(handed_back)
    finally:
        cluster.stop()
    (hung, *others) = rows
    assert hung[1] == "dead" and hung[3][-1]["kind"] == "time_limit", hung
    assert [(state, attempts) for _, state, attempts, _ in others] == [("succeeded", 1)] * 3
    assert [effects.get(i) for i in ids[1:]] == [1, 1, 1]
    assert leased(sql) == 0
