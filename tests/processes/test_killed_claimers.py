"""A killed instance's unstarted claims are returned at once, not when their leases run
out: a dispatcher SIGKILLed after its claim and before it published (the survivor hears
of the death through the lock ring, ends those claims' leases and claims them again), and
a worker SIGKILLed holding prefetched messages it never started (the dispatcher that
sent them knows they no longer wait in the broker). A message that might still come with
the old token would start nothing."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.processes.hanging_dispatcher import CLAIMED
from tests.processes.support import Cluster, effect_counts, insert_jobs, outcome, wait_for

pytestmark = pytest.mark.processes
CLAIM_TTL_S = 15.0  # long, so a return at once cannot pass for a lease run out
RETURN_BOUND_S = 3.0  # the lock ring's detection and one claim, with room for a busy machine
SLOW = "tests.handlers.recording.record_slowly"


@pytest.fixture
def long_claims(db_url, broker_url, queue_name, tmp_path):
    running = Cluster(
        database_url=db_url,
        broker_url=broker_url,
        queue=queue_name,
        logs=tmp_path,
        TEMPO_CLAIM_TTL_SECONDS=str(CLAIM_TTL_S),
        TEMPO_TUNING_DEFERRED_START_SECONDS="0",
    )
    yield running
    running.stop()


def _started_after(sql, job_ids: list[int], moment: float) -> list[float]:
    rows = sql.execute(
        "SELECT extract(epoch FROM started_at) FROM tasksapp_job WHERE id = ANY(%s)", [job_ids]
    ).fetchall()
    return [float(started) - moment for (started,) in rows]


def test_a_dispatcher_killed_between_claim_and_publish(long_claims, sql):
    cluster = long_claims
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=4)
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
        timeout=40,
        message="w1 ready",
    )
    cluster._start("hang", [sys.executable, "-m", "tests.processes.hanging_dispatcher", "hang"])
    wait_for(
        lambda: sql.execute(
            "SELECT count(*) FROM tasksapp_dispatcher WHERE stopped_at IS NULL"
        ).fetchone()[0]
        == 2,
        timeout=30,
        message="both dispatchers up",
    )
    time.sleep(3)  # a few coordination rounds: the partitions shared
    total = 40
    insert_jobs(sql, count=total, start=2, spread=0.1)
    wait_for(lambda: CLAIMED in cluster.log("hang"), timeout=20, message="hang's claim")
    held = [
        job_id
        for (job_id,) in sql.execute(
            "SELECT id FROM tasksapp_job WHERE claimed_by = 'hang' AND state = 'claimed'"
        ).fetchall()
    ]
    assert held, "the hanging dispatcher claimed some jobs"
    killed_at = sql.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
    cluster.kill("hang")

    wait_for(
        lambda: outcome(sql).get("succeeded", 0) == total,
        timeout=CLAIM_TTL_S + 20,
        message=f"{total} jobs succeeded",
    )
    counts = effect_counts(sql)
    assert len(counts) == total and set(counts.values()) == {1}
    lags = _started_after(sql, held, float(killed_at))
    print(f"{len(held)} claims of the killed dispatcher started {max(lags):.2f} s after it")
    assert max(lags) < RETURN_BOUND_S


def _worker_prefetching(cluster, name: str, *, prefetch: int) -> None:
    """A one-thread worker that takes `prefetch` messages ahead: those beyond the one it
    runs wait unstarted in its memory."""
    celery = str(Path(sys.executable).with_name("celery"))
    cluster._start(
        name,
        [
            celery,
            "-A",
            "schedapp",
            "worker",
            "-Q",
            cluster.queue,
            "-P",
            "threads",
            "-c",
            "1",
            "--prefetch-multiplier",
            str(prefetch),
            "-n",
            f"{name}.{cluster.queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=WARNING",
        ],
    )


def test_a_worker_killed_holding_prefetched_unstarted_jobs(long_claims, sql):
    """w1 runs one job and holds three more it took ahead; w2 runs the rest. w1 is
    SIGKILLed: w2 (its lock ring's watcher) tells the dispatcher at once, which returns
    w1's unstarted claims (their messages no longer wait in the broker) and claims them
    again for w2, well before their 15 s leases would run out."""
    cluster = long_claims
    cluster.dispatcher("d1")
    _worker_prefetching(cluster, "w1", prefetch=4)
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
        timeout=40,
        message="w1 ready",
    )
    total = 8
    insert_jobs(sql, count=total, start=1, spread=0.05, handler=SLOW)
    # Long enough that w1 does not finish its first job, and take one more message
    # ahead, before w2 (a Celery start on a loaded machine) reads the broker.
    sql.execute("UPDATE tasksapp_job SET payload = '{\"seconds\": 10}'")
    wait_for(
        lambda: outcome(sql).get("running", 0) == 1 and outcome(sql).get("claimed", 0) == 7,
        timeout=20,
        message="one job running on w1, seven claimed",
    )
    time.sleep(0.5)  # w1 has taken its prefetch window
    cluster.worker("w2", concurrency=total)
    wait_for(
        lambda: outcome(sql).get("running", 0) == 5,
        timeout=40,
        message="w2 runs the four messages w1 did not take",
    )
    held = [
        job_id
        for (job_id,) in sql.execute(
            "SELECT id FROM tasksapp_job WHERE state = 'claimed'"
        ).fetchall()
    ]
    assert len(held) == 3, "w1 holds three claims unstarted"
    killed_at = sql.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
    cluster.kill("w1")

    wait_for(
        lambda: outcome(sql).get("succeeded", 0) == total,
        timeout=CLAIM_TTL_S + 40,
        message=f"{total} jobs succeeded",
    )
    counts = effect_counts(sql)
    assert len(counts) == total and set(counts.values()) == {1}
    tokens = dict(sql.execute("SELECT id, lease_token FROM tasksapp_job").fetchall())
    assert all(tokens[job_id] == 2 for job_id in held), "each claimed again, once"
    lags = _started_after(sql, held, float(killed_at))
    print(f"{len(held)} unstarted claims of the killed worker started {max(lags):.2f} s after")
    assert max(lags) < RETURN_BOUND_S  # the lock ring's detection and one claim


def test_an_instance_killed_in_a_burst_leaves_no_claim_to_wait_out_its_lease(long_claims, sql):
    """Two instances, each a dispatcher and a worker; one of them SIGKILLed whole the
    moment it has claimed its share of a burst: what it claimed and had not started
    (published or not, taken by its worker or not) is claimed again by the survivor at
    once. Every job runs once, each within RETURN_BOUND_S of its time or of the kill."""
    cluster = long_claims
    for name in ("a", "b"):
        cluster.dispatcher(f"d{name}")
        cluster.worker(f"w{name}", concurrency=5)
    wait_for(
        lambda: sql.execute(
            "SELECT (SELECT count(*) FROM tasksapp_workerprocess WHERE liveness_key IS NOT NULL)"
            " + (SELECT count(*) FROM tasksapp_dispatcher WHERE stopped_at IS NULL)"
        ).fetchone()[0]
        == 4,
        timeout=40,
        message="two instances up",
    )
    time.sleep(3)  # a few coordination rounds: the partitions shared
    total = 40
    insert_jobs(sql, count=total, start=2, spread=0.2)
    wait_for(
        lambda: sql.execute(
            "SELECT count(*) FROM tasksapp_job WHERE claimed_by = 'db' AND state = 'claimed'"
        ).fetchone()[0],
        timeout=20,
        interval=0.002,
        message="db's claims",
    )
    killed_at = sql.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
    for name in ("db", "wb"):
        os.killpg(cluster.processes[name].pid, signal.SIGKILL)

    wait_for(
        lambda: outcome(sql).get("succeeded", 0) == total,
        timeout=CLAIM_TTL_S + 20,
        message=f"{total} jobs succeeded",
    )
    counts = effect_counts(sql)
    assert len(counts) == total and set(counts.values()) == {1}
    late = sql.execute(
        "SELECT max(extract(epoch FROM started_at - greatest(run_at, to_timestamp(%s))))"
        " FROM tasksapp_job",
        [float(killed_at)],
    ).fetchone()[0]
    early = sql.execute("SELECT count(*) FROM tasksapp_job WHERE started_at < run_at").fetchone()
    print(f"after the kill, the latest job started {float(late):.2f} s after its time or the kill")
    assert early[0] == 0
    assert float(late) < RETURN_BOUND_S
