"""Deferred starts, with real processes: an at-least-once job that came in a message of
several and whose handler ends within TEMPO_TUNING_DEFERRED_START_SECONDS is started and ended
in one update; a longer one shows `running` once that time has passed; a worker
SIGKILLed while its jobs' starts are still deferred (the jobs `claimed`) has them
returned at once, each attempt counted."""

from __future__ import annotations

import signal

import pytest

from tests.processes.inflight import (
    assert_killed_mid_run,
    create_tables,
    database_now,
    insert_blocking,
    states,
    wait_for_outcome,
    wait_until_running,
)
from tests.processes.support import insert_jobs, outcome, wait_for
from tests.processes.test_worker_death import DEATH_SEEN_BOUND_S, live_worker, returned_after

pytestmark = pytest.mark.processes

# Every change of a job's state, in order: what the engine wrote, not what it ended as.
TRANSITIONS = """
CREATE TABLE IF NOT EXISTS test_transitions (
    seq bigserial PRIMARY KEY, job_id bigint, old_state text, new_state text);
TRUNCATE test_transitions;
CREATE OR REPLACE FUNCTION test_log_transition() RETURNS trigger AS $$
BEGIN
    INSERT INTO test_transitions (job_id, old_state, new_state)
    VALUES (NEW.id, OLD.state, NEW.state);
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS test_log_transition ON tasksapp_job;
CREATE TRIGGER test_log_transition AFTER UPDATE ON tasksapp_job
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION test_log_transition();
"""


def same_run_time(sql) -> None:
    """Every waiting job due at the first one's run time, to the microsecond (rows
    inserted in one statement differ by their clock_timestamp()): one claim, one message."""
    sql.execute(
        "UPDATE tasksapp_job SET run_at = (SELECT min(run_at) FROM tasksapp_job"
        " WHERE state = 'scheduled') WHERE state = 'scheduled'"
    )


def transitions(sql) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for job_id, old, new in sql.execute(
        "SELECT job_id, old_state, new_state FROM test_transitions ORDER BY seq"
    ).fetchall():
        found.setdefault(job_id, []).append(f"{old}>{new}")
    return found


def test_a_short_job_is_started_and_ended_in_one_update_a_long_one_shows_running(cluster, sql):
    sql.execute(TRANSITIONS)
    # one message for the jobs due together: a message of one job starts it as before
    cluster.env.update(TEMPO_TUNING_DEFERRED_START_SECONDS="1.5", TEMPO_TUNING_FANOUT="1")
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=2)
    live_worker(sql, cluster.processes["w1"].pid)
    insert_jobs(
        sql,
        count=5,
        start=1,
        spread=0.0,
        handler="tests.handlers.recording.noop",
        delivery="at_least_once",
    )
    same_run_time(sql)
    wait_for(lambda: outcome(sql).get("succeeded") == 5, timeout=30, message="5 short jobs")
    short = transitions(sql)
    assert list(short.values()) == [["scheduled>claimed", "claimed>succeeded"]] * 5, short
    rows = sql.execute(
        "SELECT attempts, claimed_by, started_at >= run_at AND finished_at >= started_at"
        " FROM tasksapp_job"
    ).fetchall()
    workers = {name for (name,) in sql.execute("SELECT name FROM tasksapp_workerprocess")}
    # each attempt counted, the worker process that ran it named, its begin recorded
    assert all(attempts == 1 and by in workers and ordered for attempts, by, ordered in rows)

    sql.execute("DELETE FROM tasksapp_job; TRUNCATE test_transitions")
    insert_jobs(
        sql,
        count=2,
        start=1,
        spread=0.0,
        handler="tests.handlers.recording.record_slowly",
        delivery="at_least_once",
    )
    sql.execute("UPDATE tasksapp_job SET payload = '{\"seconds\": 3}'")
    same_run_time(sql)
    wait_for(lambda: outcome(sql).get("running") == 2, timeout=30, message="shown running")
    wait_for(lambda: outcome(sql).get("succeeded") == 2, timeout=30, message="long jobs done")
    long = list(transitions(sql).values())
    assert long == [["scheduled>claimed", "claimed>running", "running>succeeded"]] * 2, long
    sql.execute("DROP TRIGGER test_log_transition ON tasksapp_job")


def test_a_killed_workers_jobs_whose_starts_were_deferred_return_at_once_counted(cluster, sql):
    """Starts deferred 8 s, claims held 20 s: the kill lands while the jobs are still
    `claimed` (their handlers blocking), so only the worker's record of what it held
    explains their return within seconds, each with its attempt counted."""
    cluster.env.update(
        TEMPO_RUN_LEASE_SECONDS="30",
        TEMPO_CLAIM_TTL_SECONDS="20",
        TEMPO_TUNING_DEFERRED_START_SECONDS="8",
        TEMPO_BATCH_PARALLELISM="4",  # the four in one message, run side by side
    )
    create_tables(sql)
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=1)
    live_worker(sql, cluster.processes["w1"].pid)
    ids = insert_blocking(sql, count=4, delivery="at_least_once", key="deferred")
    same_run_time(sql)
    wait_until_running(sql, ids)
    assert states(sql, ids) == {"claimed": 4}  # the handlers run; no start written yet
    held = sql.execute(
        "SELECT held FROM tasksapp_workerprocess WHERE pid = %s", [cluster.processes["w1"].pid]
    ).fetchone()[0]
    assert {int(job_id) for job_id in held} >= set(ids)
    cluster.kill("w1", signal.SIGKILL)
    killed_at = database_now(sql)
    cluster.worker("w2", concurrency=4)

    wait_for_outcome(sql, ids, "at_least_once", timeout=DEATH_SEEN_BOUND_S + 20)
    assert_killed_mid_run(sql, ids, "at_least_once")  # attempt 1 counted, run again once
    after = returned_after(sql, ids, killed_at)
    print(f"deferred starts: the killed worker's 4 jobs returned {after:.2f} s after")
    assert after < DEATH_SEEN_BOUND_S < 20
