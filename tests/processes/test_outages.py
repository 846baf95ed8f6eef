"""Broker and database outages, on server instances the tests start on their own ports."""

import time
import uuid

import psycopg
import pytest

from tests.processes.support import (
    EFFECTS_TABLE,
    Cluster,
    PrivatePostgres,
    PrivateRedis,
    effect_counts,
    insert_jobs,
    migrate,
    outcome,
    wait_for,
)

pytestmark = pytest.mark.processes


@pytest.fixture
def private_redis():
    server = PrivateRedis().start()
    yield server
    server.stop()


@pytest.fixture
def private_postgres():
    server = PrivatePostgres().start()
    yield server
    server.stop()


def assert_all_ran_exactly_once(conn, count):
    wait_for(
        lambda: outcome(conn).get("succeeded") == count,
        timeout=60,
        message=f"all {count} succeeded",
    )
    effects = effect_counts(conn)
    assert len(effects) == count and set(effects.values()) == {1}
    early = conn.execute("SELECT count(*) FROM tasksapp_job WHERE started_at < run_at")
    assert early.fetchone()[0] == 0


def test_redis_flushed_mid_run_loses_and_doubles_nothing(db_url, sql, private_redis, tmp_path):
    import redis

    cluster = Cluster(
        database_url=db_url, broker_url=private_redis.url, queue="tempo", logs=tmp_path
    )
    try:
        cluster.dispatcher("d1")
        cluster.dispatcher("d2")
        cluster.worker("w1", concurrency=8)
        insert_jobs(sql, count=400, start=3, spread=10)
        time.sleep(7)
        redis.Redis(port=private_redis.port).flushall()
        assert_all_ran_exactly_once(sql, 400)
        reaped = sql.execute("SELECT sum(reaped) FROM tasksapp_dispatchercounter").fetchone()
        assert reaped[0] is None or reaped[0] >= 0  # recovered claims are counted
    finally:
        cluster.stop()


def test_postgres_restarted_mid_run_loses_and_doubles_nothing(
    private_postgres, broker_url, tmp_path
):
    migrate(private_postgres.url)
    queue = f"tempo-test-{uuid.uuid4().hex[:8]}"
    cluster = Cluster(
        database_url=private_postgres.url, broker_url=broker_url, queue=queue, logs=tmp_path
    )
    try:
        with psycopg.connect(private_postgres.url, autocommit=True) as conn:
            conn.execute(EFFECTS_TABLE)
            cluster.dispatcher("d1")
            cluster.dispatcher("d2")
            cluster.worker("w1", concurrency=8)
            insert_jobs(conn, count=400, start=3, spread=12)
        time.sleep(7)
        private_postgres.restart()
        with psycopg.connect(private_postgres.url, autocommit=True) as conn:
            assert_all_ran_exactly_once(conn, 400)
        assert "reconnecting" in cluster.log("d1") + cluster.log("d2")
    finally:
        cluster.stop()
        import redis

        client = redis.Redis.from_url(broker_url)
        for key in client.scan_iter(f"*{queue}*"):
            client.delete(key)
