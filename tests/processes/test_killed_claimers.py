"""A killed instance's unstarted claims are returned at once, not when their leases run
out: a dispatcher SIGKILLed after its claim and before it published. The survivor hears
of the death through the lock ring, ends those claims' leases and claims them again; a
message that might still come with the old token would start nothing."""

from __future__ import annotations

import sys
import time

import pytest

from tests.processes.hanging_dispatcher import CLAIMED
from tests.processes.support import Cluster, effect_counts, insert_jobs, outcome, wait_for

pytestmark = pytest.mark.processes
CLAIM_TTL_S = 15.0  # long, so a return at once cannot pass for a lease run out
RETURN_BOUND_S = 3.0  # the lock ring's detection and one claim, with room for a busy machine


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
