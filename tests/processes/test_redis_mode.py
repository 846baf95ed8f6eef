"""Redis dispatch mode with real processes: the index emptied or its server stopped
mid-run. Nothing is lost or doubled, and nothing is later than the poll interval."""

import time
import uuid

import pytest
import redis

from tests.processes.support import (
    Cluster,
    effect_counts,
    insert_jobs,
    outcome,
    wait_for,
)

pytestmark = pytest.mark.processes

POLL_INTERVAL = 10.0  # the bound on lateness this test asserts


def redis_settings(index_url: str) -> dict[str, str]:
    return {
        "TEMPO_DISPATCH_MODE": "redis",
        "TEMPO_INDEX_REDIS_URL": index_url,
        "TEMPO_TUNING_POLL_INTERVAL_SECONDS": str(POLL_INTERVAL),
        "TEMPO_LOOKAHEAD_SECONDS": str(POLL_INTERVAL + 5),
        "TEMPO_TUNING_INDEX_LEASE_SECONDS": "2",
    }


def modes(conn) -> set[str]:
    rows = conn.execute(
        "SELECT dispatch_mode FROM tasksapp_dispatcher WHERE stopped_at IS NULL"
    ).fetchall()
    return {row[0] for row in rows}


def assert_all_ran_once_in_time(conn, count: int) -> None:
    wait_for(
        lambda: outcome(conn).get("succeeded") == count,
        timeout=90,
        message=f"all {count} succeeded",
    )
    effects = effect_counts(conn)
    assert len(effects) == count and set(effects.values()) == {1}
    early, late = conn.execute(
        "SELECT count(*) FILTER (WHERE started_at < run_at),"
        " max(extract(epoch FROM started_at - run_at)) FROM tasksapp_job"
    ).fetchone()
    assert early == 0
    assert late < POLL_INTERVAL


def test_index_flushed_mid_run_loses_doubles_and_delays_nothing(
    db_url, sql, private_redis, tmp_path
):
    cluster = Cluster(
        database_url=db_url,
        broker_url=private_redis.url,
        queue="tempo",
        logs=tmp_path,
        **redis_settings(private_redis.url),
    )
    try:
        cluster.dispatcher("d1")
        cluster.dispatcher("d2")
        cluster.worker("w1", concurrency=8)
        wait_for(lambda: modes(sql) == {"redis"}, timeout=20, message="index built")
        insert_jobs(sql, count=400, start=3, spread=10)
        time.sleep(6)
        redis.Redis(port=private_redis.port).flushall()
        insert_jobs(sql, count=100, start=1, spread=4)  # announced into an empty index
        assert_all_ran_once_in_time(sql, 500)
        logs = cluster.log("d1") + cluster.log("d2")
        assert "index lost" in logs
        wait_for(lambda: modes(sql) == {"redis"}, timeout=20, message="index rebuilt")
    finally:
        cluster.stop()


def test_index_server_stopped_and_restarted_mid_run(
    db_url, sql, broker_url, private_redis, tmp_path
):
    queue = f"tempo-test-{uuid.uuid4().hex[:8]}"
    cluster = Cluster(
        database_url=db_url,
        broker_url=broker_url,
        queue=queue,
        logs=tmp_path,
        **redis_settings(private_redis.url),
    )
    try:
        cluster.dispatcher("d1")
        cluster.dispatcher("d2")
        cluster.worker("w1", concurrency=8)
        wait_for(lambda: modes(sql) == {"redis"}, timeout=20, message="index built")
        insert_jobs(sql, count=300, start=2, spread=12)
        time.sleep(4)
        private_redis.stop()
        insert_jobs(sql, count=100, start=1, spread=4)  # created while Redis is down
        wait_for(lambda: modes(sql) == {"redis-unreachable"}, timeout=20, message="fallback shown")
        time.sleep(3)
        private_redis.start()
        assert_all_ran_once_in_time(sql, 400)
        wait_for(lambda: modes(sql) == {"redis"}, timeout=20, message="back on the index")
        assert "redis unreachable" in cluster.log("d1") + cluster.log("d2")
    finally:
        cluster.stop()
        client = redis.Redis.from_url(broker_url)
        for key in client.scan_iter(f"*{queue}*"):
            client.delete(key)
