"""A worker SIGKILLed in the middle of a group of transactional jobs (one transaction,
a savepoint per job): nothing of the group is committed, every job runs again with
exactly one committed effect."""

import signal

import pytest

from tests.processes.inflight import (
    BLOCKING,
    create_tables,
    effects,
    jobs,
    starts,
    wait_for_outcome,
)
from tests.processes.support import Cluster, wait_for

pytestmark = pytest.mark.processes

COUNT = 4


@pytest.fixture
def grouping_cluster(db_url, broker_url, queue_name, tmp_path):
    """One message per due batch (`TEMPO_TUNING_FANOUT=1`) and a group that stays open for the
    whole batch, so that the kill lands while earlier jobs wait for its commit."""
    running = Cluster(
        database_url=db_url,
        broker_url=broker_url,
        queue=queue_name,
        logs=tmp_path,
        TEMPO_TUNING_FANOUT="1",
        TEMPO_TUNING_TRANSACTION_GROUP_MS="60000",
    )
    yield running
    running.stop()


def insert_batch(conn, *, count: int, block: float) -> list[int]:
    """`count` transactional jobs due together; each first attempt records its effect,
    marks itself started and sleeps `block` s."""
    rows = conn.execute(
        """
        INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
            retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error,
            errors)
        SELECT %(handler)s, jsonb_build_object('block', %(block)s::float8), now + interval '1 s',
            'scheduled', 0, 3, '{"delays": [0.5]}', 'transactional', 'group:' || i, 0, '',
            '', '[]'
        FROM generate_series(1, %(count)s) AS i, (SELECT clock_timestamp() AS now) AS t
        RETURNING id
        """,
        {"handler": BLOCKING, "block": block, "count": count},
    ).fetchall()
    return sorted(row[0] for row in rows)


def started_first_attempts(conn, ids: list[int]) -> int:
    return conn.execute(
        "SELECT count(*) FROM test_started WHERE attempt = 1 AND job_id = ANY(%s)", [ids]
    ).fetchone()[0]


def worker_running(cluster: Cluster, conn, ids: list[int]) -> str:
    """The worker running every one of the jobs (started in one batch, none finished)."""
    rows = conn.execute(
        "SELECT claimed_by FROM tasksapp_job WHERE id = ANY(%s) AND state = 'running'", [ids]
    ).fetchall()
    assert len(rows) == len(ids), rows
    (pid,) = {int(claimed_by.rsplit(":", 1)[1]) for (claimed_by,) in rows}
    return next(name for name, process in cluster.processes.items() if process.pid == pid)


def test_a_worker_killed_in_a_group_commits_nothing_of_it(grouping_cluster, sql):
    """One worker slot runs the batch's jobs one after another in one group. Killed while
    the third handler runs (two returned, their effects waiting for the commit, one not
    begun): no effect is committed; after the leases expire each job runs again and ends
    with exactly one committed effect, that of its second run (its first attempt given
    back: the lost run committed nothing)."""
    create_tables(sql)
    grouping_cluster.dispatcher("d1")
    for name in ("w1", "w2"):  # the survivor is up already: the re-runs wait for no start-up
        grouping_cluster.worker(name, concurrency=1)
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0] == 2,
        timeout=30,
        message="two workers ready",
    )
    ids = insert_batch(sql, count=COUNT, block=0.8)
    wait_for(
        lambda: started_first_attempts(sql, ids) == 3,
        timeout=30,
        interval=0.02,
        message="three handlers began",
    )
    victim = worker_running(grouping_cluster, sql, ids)
    grouping_cluster.kill(victim, signal.SIGKILL)
    assert sql.execute("SELECT count(*) FROM test_keyed_effects").fetchone()[0] == 0

    wait_for_outcome(sql, ids, "transactional", timeout=60)
    rows, done, began = jobs(sql, ids), effects(sql, ids), starts(sql, ids)
    for job_id in ids:
        job = rows[job_id]
        # Rolled back with the group: run again, the attempt not counted.
        assert job["attempts"] == 1, (job_id, job)
        assert [e["kind"] for e in job["errors"]] == ["lost_run"], (job_id, job["errors"])
        assert done[job_id] == [(1, job["key"])], (job_id, done[job_id])
    assert sorted(len(attempts) for attempts in began.values()) == [1, 2, 2, 2]
