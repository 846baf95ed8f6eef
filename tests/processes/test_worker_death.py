"""A worker's death is seen at once, not when its leases run out; a stall is not a death.

The run lease is 30 s here: a job of a SIGKILLed worker returned within a few seconds was
returned because PostgreSQL ended the worker's liveness session (and freed its lock), not
because its lease ran out. A frozen worker (SIGSTOP) keeps its session: its job is left
to its lease."""

from __future__ import annotations

import signal
import time

import pytest

from tasksapp.engine.cluster.sql import WORKER_LOCK_CLASS
from tests.conftest import THIS_DATABASE
from tests.processes.inflight import (
    MODES,
    assert_killed_mid_run,
    create_tables,
    database_now,
    insert_blocking,
    states,
    wait_for_outcome,
    wait_until_running,
)
from tests.processes.support import partitions_by_session, wait_for

pytestmark = pytest.mark.processes
LEASE_S = 30.0
DEATH_SEEN_BOUND_S = 8.0  # the dispatchers' check (1 s) and the reap, on a busy machine


def returned_after(sql, ids: list[int], killed_at) -> float:
    """Seconds from the kill to the last of these jobs' `lease_expired` entries."""
    return sql.execute(
        "SELECT max(extract(epoch FROM (e->>'at')::timestamptz - %s)) FROM tasksapp_job,"
        " jsonb_array_elements(errors) AS e WHERE id = ANY(%s)",
        [killed_at, ids],
    ).fetchone()[0]


def live_worker(sql, pid: int) -> None:
    wait_for(
        lambda: sql.execute(
            "SELECT count(*) FROM tasksapp_workerprocess WHERE pid = %s"
            " AND liveness_key IS NOT NULL",
            [pid],
        ).fetchone()[0],
        timeout=30,
        message=f"worker {pid} holds its liveness lock",
    )


@pytest.mark.parametrize("notify", ["true", "false"], ids=["notify", "polling-only"])
def test_a_killed_workers_jobs_are_returned_at_once_in_every_mode(cluster, sql, notify):
    """The dispatcher that finds the death returns the jobs of every partition; with
    notifications their owners hear of them, polling only it claims them itself."""
    cluster.env.update(
        TEMPO_RUN_LEASE_SECONDS=str(LEASE_S),
        TEMPO_DISPATCH_NOTIFY=notify,
        TEMPO_NOTIFY_OFF_POLL_SECONDS="2",
    )
    create_tables(sql)
    cluster.dispatcher("d1")
    cluster.dispatcher("d2")
    cluster.worker("w1", concurrency=6)
    live_worker(sql, cluster.processes["w1"].pid)
    ids = {
        mode: insert_blocking(sql, count=2, delivery=mode, key=f"death-{mode}") for mode in MODES
    }
    everything = [job_id for batch in ids.values() for job_id in batch]
    wait_until_running(sql, everything)
    cluster.kill("w1", signal.SIGKILL)
    killed_at = database_now(sql)
    cluster.worker("w2", concurrency=6)

    for mode, batch in ids.items():
        wait_for_outcome(sql, batch, mode, timeout=DEATH_SEEN_BOUND_S + 20)
        assert_killed_mid_run(sql, batch, mode)
    after = returned_after(sql, everything, killed_at)
    print(f"notify {notify}: the killed worker's 6 jobs returned {after:.2f} s after")
    assert after < DEATH_SEEN_BOUND_S < LEASE_S
    time.sleep(2)
    assert states(sql, ids["at_most_once"]) == {"lost": 2}  # not run again
    # the death was found once, and its row says so
    assert sql.execute(
        "SELECT liveness_key FROM tasksapp_workerprocess WHERE pid = %s",
        [cluster.processes["w1"].pid],
    ).fetchone() == (None,)


def test_polling_only_the_dispatcher_that_finds_a_death_runs_the_jobs_of_every_partition(
    cluster, sql
):
    """Polling only, no NOTIFY tells a partition's owner that its jobs came back: the
    dispatcher that finds a worker's death returns and claims the jobs of every partition
    itself. Here d2 looks for dead workers once a minute and reaps at its jobs' 20 s
    claim and 30 s run leases: its partitions' jobs run again within seconds only if d1
    takes them."""
    cluster.env.update(
        TEMPO_RUN_LEASE_SECONDS=str(LEASE_S),
        TEMPO_CLAIM_TTL_SECONDS="20",
        TEMPO_DISPATCH_NOTIFY="false",
        TEMPO_NOTIFY_OFF_POLL_SECONDS="2",
    )
    create_tables(sql)
    cluster.dispatcher("d1")
    cluster.env["TEMPO_TUNING_WORKER_CHECK_SECONDS"] = "60"
    cluster.dispatcher("d2")
    wait_for(lambda: partitions_by_session(sql) == [8, 8], timeout=30, message="8 partitions each")
    cluster.worker("w1", concurrency=16)
    live_worker(sql, cluster.processes["w1"].pid)
    ids = insert_blocking(sql, count=16, delivery="at_least_once", key="death-polling")
    assert len({job_id % 16 for job_id in ids}) == 16  # every partition, both owners
    wait_until_running(sql, ids)
    cluster.kill("w1", signal.SIGKILL)
    killed_at = database_now(sql)
    cluster.worker("w2", concurrency=16)

    wait_for_outcome(sql, ids, "at_least_once", timeout=DEATH_SEEN_BOUND_S + 10)
    assert_killed_mid_run(sql, ids, "at_least_once")
    after = returned_after(sql, ids, killed_at)
    print(f"polling only: the killed worker's 16 jobs returned {after:.2f} s after")
    assert after < DEATH_SEEN_BOUND_S < LEASE_S


def test_a_frozen_worker_keeps_its_jobs_until_its_lease_runs_out(cluster, sql):
    cluster.env["TEMPO_RUN_LEASE_SECONDS"] = "12"
    create_tables(sql)
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=2)
    live_worker(sql, cluster.processes["w1"].pid)
    (job_id,) = insert_blocking(sql, count=1, delivery="at_least_once", key="frozen")
    wait_until_running(sql, [job_id])
    # its start written (deferred 1 s): frozen from now on, it holds a run lease
    wait_for(lambda: states(sql, [job_id]) == {"running": 1}, timeout=10, message="started")
    cluster.kill("w1", signal.SIGSTOP)
    try:
        time.sleep(5)  # five worker checks, within the lease (at least 8 s left)
        assert states(sql, [job_id]) == {"running": 1}  # alive, if frozen: not a death
        wait_for(
            lambda: states(sql, [job_id]) != {"running": 1},
            timeout=20,
            message="the lease ran out",
        )
    finally:
        cluster.kill("w1", signal.SIGCONT)
    errors = sql.execute("SELECT errors FROM tasksapp_job WHERE id = %s", [job_id]).fetchone()[0]
    assert [entry["kind"] for entry in errors] == ["lease_expired"]


RARE_CHECK_S = "120"  # the dispatchers' periodic look: far beyond every bound below
HEARD_BOUND_S = 8.0  # the lease is 30 s and the next periodic look 120 s away


def watched(sql, pid: int) -> None:
    """Another worker process waits on this one's liveness lock (the lock ring)."""
    wait_for(
        lambda: sql.execute(
            "SELECT count(*) FROM pg_locks l JOIN tasksapp_workerprocess w"
            " ON l.objid = w.liveness_key::oid WHERE w.pid = %s AND l.locktype = 'advisory'"
            f" AND l.classid = %s AND NOT l.granted AND l.{THIS_DATABASE}",
            [pid, WORKER_LOCK_CLASS],
        ).fetchone()[0],
        timeout=30,
        message=f"worker {pid} watched by a peer",
    )


def jobs_running_on_w1(cluster, sql, key: str, **env: str) -> list[int]:
    """Two dispatchers; four at-least-once jobs running on worker w1; w2 started beside
    it, idle. The periodic look for dead workers is two minutes away."""
    cluster.env.update(
        TEMPO_RUN_LEASE_SECONDS=str(LEASE_S), TEMPO_TUNING_WORKER_CHECK_SECONDS=RARE_CHECK_S, **env
    )
    create_tables(sql)
    cluster.dispatcher("d1")
    cluster.dispatcher("d2")
    cluster.worker("w1", concurrency=4)
    live_worker(sql, cluster.processes["w1"].pid)
    ids = insert_blocking(sql, count=4, delivery="at_least_once", key=key)
    wait_until_running(sql, ids)
    cluster.worker("w2", concurrency=4)
    return ids


def assert_returned_soon(sql, ids: list[int], killed_at, what: str) -> None:
    """Run again once each, returned within seconds of the kill: long before the next
    periodic look (120 s) or the lease (30 s) could have returned them."""
    wait_for_outcome(sql, ids, "at_least_once", timeout=HEARD_BOUND_S + 20)
    assert_killed_mid_run(sql, ids, "at_least_once")
    after = returned_after(sql, ids, killed_at)
    print(f"{what}: the killed worker's {len(ids)} jobs returned {after:.2f} s after the kill")
    assert after < HEARD_BOUND_S


def test_a_worker_hears_the_next_one_die_and_the_dispatchers_look_at_once(cluster, sql):
    """Only the ring (a live worker's wait on the dead one's lock, then `worker-gone`)
    explains jobs returned within seconds."""
    ids = jobs_running_on_w1(cluster, sql, "ring")
    live_worker(sql, cluster.processes["w2"].pid)
    watched(sql, cluster.processes["w1"].pid)
    time.sleep(1)  # the dispatchers' first look (at start) is long past: the next is not
    cluster.kill("w1", signal.SIGKILL)
    assert_returned_soon(sql, ids, database_now(sql), "the ring")


@pytest.mark.parametrize(
    "mode_env",
    [
        {"TEMPO_DISPATCH_NOTIFY": "false", "TEMPO_NOTIFY_OFF_POLL_SECONDS": "2"},
        {"TEMPO_WORKER_WATCH": "false"},
    ],
    ids=["polling-only", "notify-without-ring"],
)
def test_a_worker_killed_with_its_dispatcher_is_looked_for_when_the_dispatcher_dies(
    cluster, sql, mode_env
):
    """One host's dispatcher and worker SIGKILLed together, no worker ring to hear it: the
    survivor hears of its peer's death (its own lock ring) and looks for dead workers at
    once, and once more shortly after, not at its next periodic look."""
    ids = jobs_running_on_w1(cluster, sql, "host", **mode_env)
    time.sleep(1)
    cluster.kill("d1", signal.SIGKILL)
    cluster.kill("w1", signal.SIGKILL)
    assert_returned_soon(sql, ids, database_now(sql), str(mode_env))
