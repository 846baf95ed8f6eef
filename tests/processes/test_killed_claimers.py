"""A killed instance's unstarted claims are returned at once, not when their leases run
out: a dispatcher SIGKILLed after its claim and before it published (the survivor hears
of the death through the lock ring, ends those claims' leases and claims them again), and
a worker SIGKILLed holding prefetched messages it never started (the dispatcher that
sent them knows they no longer wait in the broker). A message that might still come with
the old token would start nothing."""

from __future__ import annotations

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
        TEMPO_DEFERRED_START_SECONDS="0",
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
    sql.execute("UPDATE tasksapp_job SET payload = '{\"seconds\": 3}'")
    wait_for(
        lambda: outcome(sql).get("running", 0) == 1 and outcome(sql).get("claimed", 0) == 7,
        timeout=20,
        message="one job running on w1, seven claimed",
    )
    time.sleep(0.5)  # w1 has taken its prefetch window
    killed_at = sql.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
    cluster.kill("w1")
    cluster.worker("w2", concurrency=total)

    wait_for(
        lambda: outcome(sql).get("succeeded", 0) == total,
        timeout=CLAIM_TTL_S + 40,
        message=f"{total} jobs succeeded",
    )
    counts = effect_counts(sql)
    assert len(counts) == total and set(counts.values()) == {1}
    reclaimed = sql.execute(
        "SELECT id FROM tasksapp_job WHERE lease_token > 1 AND attempts = 1"
    ).fetchall()
    assert reclaimed, "some claims were returned unstarted and claimed again"
    lags = _started_after(sql, [job_id for (job_id,) in reclaimed], float(killed_at))
    print(f"{len(reclaimed)} unstarted claims of the killed worker started {max(lags):.2f} s after")
    assert max(lags) < CLAIM_TTL_S - 5  # not waiting out their leases (15 s)
