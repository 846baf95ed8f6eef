"""Routing in Redis dispatch mode, with real dispatchers and Celery workers: the jobs
taken from the index are claimed by priority, held while their queue is paused, and
within their queue's concurrency and rate limits (the handlers' own records)."""

import pytest

from tasksapp.engine.queues import queue_configure, queue_resume
from tests.processes.routing import create_runs_table, insert_routed, most_at_once
from tests.processes.support import Cluster, outcome, wait_for

pytestmark = pytest.mark.processes


@pytest.fixture
def redis_cluster(db_url, broker_url, queue_name, tmp_path):
    """The index on the broker's Redis, under the test queue's prefix (purged after)."""

    def make(**settings: str) -> Cluster:
        made = Cluster(
            database_url=db_url,
            broker_url=broker_url,
            queue=queue_name,
            logs=tmp_path,
            TEMPO_DISPATCH_MODE="redis",
            TEMPO_INDEX_PREFIX=f"{queue_name}:",
            **settings,
        )
        started.append(made)
        return made

    started: list[Cluster] = []
    yield make
    for made in started:
        made.stop()


def indexed(conn, count: int) -> None:
    """Wait until `count` dispatchers serve every partition from the index."""
    wait_for(
        lambda: conn.execute(
            "SELECT count(*) FILTER (WHERE dispatch_mode = 'redis'), count(*)"
            " FROM tasksapp_dispatcher WHERE stopped_at IS NULL"
        ).fetchone()
        == (count, count),
        timeout=20,
        message="the index built",
    )


def worker_ready(conn) -> None:
    wait_for(
        lambda: conn.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
        timeout=30,
        message="the worker's heartbeat",
    )


def states(conn, ids) -> dict[str, int]:
    rows = conn.execute(
        "SELECT state, count(*) FROM tasksapp_job WHERE id = ANY(%s) GROUP BY state", [ids]
    ).fetchall()
    return dict(rows)


def test_limits_pauses_and_rates_hold_for_jobs_taken_from_the_index(redis_cluster, sql):
    create_runs_table(sql)
    queue_configure(name="sync", concurrency_limit=2)
    queue_configure(name="api", rate_limit=10, rate_period=1.0)
    queue_configure(name="held", paused=True)
    cluster = redis_cluster()
    cluster.dispatcher("d1")
    cluster.dispatcher("d2")
    cluster.worker("w1", concurrency=8, queues=("default", "sync", "api", "held"))
    indexed(sql, 2)
    worker_ready(sql)
    sync = insert_routed(sql, count=10, queue="sync", payload={"seconds": 0.2})
    free = insert_routed(sql, count=10, payload={"seconds": 0.2})
    api = insert_routed(sql, count=15, queue="api")
    held = insert_routed(sql, count=3, queue="held")
    wait_for(
        lambda: states(sql, sync + free + api) == {"succeeded": 35},
        timeout=30,
        message="the unpaused jobs succeeded",
    )
    assert most_at_once(sql, where="j.queue = 'sync'") == 2
    assert most_at_once(sql, where="j.queue = 'default'") > 2  # unlimited: more slots
    # 10 a second after a burst of 2: the last of 15 claimed 1.3 s after the first.
    (claimed,) = sql.execute(
        "SELECT extract(epoch FROM max(claimed_at) - min(claimed_at))::float8"
        " FROM tasksapp_job WHERE queue = 'api'"
    ).fetchone()
    assert 1.25 <= claimed < 3.0
    assert states(sql, held) == {"scheduled": 3}  # taken from the index, held while paused
    queue_resume(name="held")
    wait_for(lambda: states(sql, held) == {"succeeded": 3}, timeout=15, message="resumed")
    assert outcome(sql) == {"succeeded": 38}
    assert "limited claimer" not in cluster.log("d1") + cluster.log("d2")  # no errors


def test_higher_priority_jobs_taken_later_overtake_a_backlog(redis_cluster, sql):
    """One slot and room for one message: twelve low jobs due first make a backlog;
    five high ones due 0.5 s later run before the low ones still waiting."""
    create_runs_table(sql)
    cluster = redis_cluster(TEMPO_TUNING_MAX_QUEUED_MESSAGES="1", TEMPO_TUNING_MAX_BATCH="1")
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=1)
    indexed(sql, 1)
    worker_ready(sql)
    low = insert_routed(sql, count=12, priority=1, payload={"seconds": 0.1}, start=1.0)
    high = insert_routed(sql, count=5, priority=8, payload={"seconds": 0.1}, start=1.5)
    wait_for(lambda: states(sql, low + high) == {"succeeded": 17}, timeout=30, message="all ran")
    order = [
        job_id
        for (job_id,) in sql.execute("SELECT job_id FROM test_runs ORDER BY began_at").fetchall()
    ]
    first_high = min(order.index(job_id) for job_id in high)
    last_high = max(order.index(job_id) for job_id in high)
    # Between the first high job and the last, at most the one low job whose message was
    # already in the broker; the low backlog runs after them.
    assert last_high - first_high <= len(high)
    assert sum(1 for job_id in order[last_high:] if job_id in low) >= 3
