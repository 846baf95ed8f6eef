"""The whole path through a real PgBouncer in transaction pooling mode: jobs scheduled by
a process whose connection goes through the pooler, dispatchers whose claims go through
it while their advisory locks and LISTEN use a direct session connection, workers whose
starts and finishes go through it, and a worker killed mid-run."""

import os
import signal
import subprocess
import sys

import pytest

from tests.processes.inflight import (
    assert_killed_mid_run,
    create_tables,
    insert_blocking,
    wait_for_outcome,
    wait_until_running,
)
from tests.processes.support import (
    PGBOUNCER,
    ROOT,
    PrivatePgBouncer,
    effect_counts,
    outcome,
    partitions_by_session,
    wait_for,
)

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(
        not PGBOUNCER.exists(), reason="PgBouncer is not installed (Debian's pgbouncer)"
    ),
]

SCHEDULED = 60

SCHEDULE = """
import datetime as dt
from tasksapp.engine.services import job_schedule
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SELECT clock_timestamp()")
    soon = cursor.fetchone()[0] + dt.timedelta(seconds=3)
for i in range({count}):
    job_schedule(handler="tests.handlers.recording.record", run_at=soon + dt.timedelta(
        milliseconds=50 * i), idempotency_key=f"through-the-pooler:{{i}}")
"""


@pytest.fixture
def bouncer(db_url):
    database = db_url.rsplit("/", 1)[1]
    running = PrivatePgBouncer(database=database).start()
    yield running
    running.stop()


@pytest.fixture
def pooled(cluster, bouncer, db_url):
    """The cluster's processes reach PostgreSQL through the pooler's engine entry."""
    cluster.env.update(
        DATABASE_URL=bouncer.url(f"{bouncer.database}_engine"),
        TEMPO_DB_POOLER="transaction",
        TEMPO_SESSION_DATABASE_URL=db_url,
    )
    return cluster


def schedule_through(url: str, count: int) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "TEMPO_DB_POOLER": "transaction",
        "DJANGO_SECRET_KEY": "test-only-" * 6,
    }
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SCHEDULE.format(count=count)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )


def test_jobs_run_exactly_once_through_a_transaction_pooler(pooled, bouncer, sql):
    create_tables(sql)
    pooled.dispatcher("d1")
    pooled.dispatcher("d2")
    pooled.worker("w1", concurrency=4)
    schedule_through(bouncer.url(bouncer.database), SCHEDULED)
    assert outcome(sql) == {"scheduled": SCHEDULED}

    wait_for(lambda: outcome(sql) == {"succeeded": SCHEDULED}, timeout=60, message="all succeeded")
    effects = effect_counts(sql)
    assert len(effects) == SCHEDULED and set(effects.values()) == {1}
    started_early = sql.execute(
        "SELECT count(*) FROM tasksapp_job WHERE started_at < run_at"
    ).fetchone()[0]
    assert started_early == 0
    # Both dispatchers share the partitions, locked over their direct sessions.
    wait_for(
        lambda: partitions_by_session(sql) == [8, 8],
        timeout=30,
        message="the partitions shared 8 and 8",
    )
    # The work itself went through the pooler, on its engine entry.
    assert bouncer.transactions(f"{bouncer.database}_engine") > 3 * SCHEDULED
    assert "no such database" not in bouncer.log()


def test_a_worker_killed_mid_run_behind_the_pooler_runs_the_job_again_once(pooled, sql):
    create_tables(sql)
    pooled.dispatcher("d1")
    pooled.worker("w1", concurrency=4)
    ids = insert_blocking(sql, count=4, delivery="transactional")
    wait_until_running(sql, ids)
    pooled.kill("w1", signal.SIGKILL)
    pooled.worker("w2", concurrency=4)
    wait_for_outcome(sql, ids, "transactional", timeout=60)
    assert_killed_mid_run(sql, ids, "transactional")


def test_the_engine_leaves_no_session_state_on_pooled_server_connections(cluster, db_url, sql):
    """Tempo sets no session state behind the pooler (its asynchronous commit is the
    pooler's `connect_query`): engine processes sharing the web's entry leave every server
    connection of the pool with synchronous commits for the web's writes."""
    import psycopg

    pool_size = 3
    bouncer = PrivatePgBouncer(database=db_url.rsplit("/", 1)[1], pool_size=pool_size).start()
    try:
        shared = bouncer.url(bouncer.database)
        cluster.env.update(
            DATABASE_URL=shared, TEMPO_DB_POOLER="transaction", TEMPO_SESSION_DATABASE_URL=db_url
        )
        cluster.dispatcher("d1")
        cluster.worker("w1", concurrency=2)
        schedule_through(shared, 10)
        wait_for(lambda: outcome(sql) == {"succeeded": 10}, timeout=60, message="all succeeded")
        # As many open transactions as the pool has server connections: one on each.
        webs = [psycopg.connect(shared) for _ in range(pool_size)]
        try:
            seen = [web.execute("SHOW synchronous_commit").fetchone()[0] for web in webs]
        finally:
            for web in webs:
                web.close()
        assert seen == ["on"] * pool_size
        with psycopg.connect(bouncer.url(f"{bouncer.database}_engine")) as engine:
            assert engine.execute("SHOW synchronous_commit").fetchone()[0] == "off"
    finally:
        cluster.stop()
        bouncer.stop()


def test_a_dispatcher_behind_a_pooler_without_a_session_url_refuses_to_start(cluster, bouncer):
    cluster.env.update(DATABASE_URL=bouncer.url(bouncer.database), TEMPO_DB_POOLER="transaction")
    process = cluster.dispatcher("d1")
    assert process.wait(timeout=60) != 0
    assert "TEMPO_SESSION_DATABASE_URL" in cluster.log("d1")
