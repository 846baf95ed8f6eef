"""Retention runs beside live dispatchers and workers: it removes old finished jobs in
small batches while new jobs are claimed and run, and none of them fails, runs twice or
goes missing."""

import subprocess
import sys
import time

import pytest

from tests.processes.inflight import database_now
from tests.processes.support import ROOT, effect_counts, insert_jobs, outcome, wait_for

pytestmark = pytest.mark.processes

OLD = 30_000
NEW = 400

INSERT_OLD = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors,
    started_at, finished_at)
SELECT 'tests.handlers.recording.record', '{}', t, 'succeeded', 1, 5, '{}', 'transactional',
    'old:' || i, 1, '', '', '[]', t, t + interval '10 ms'
FROM generate_series(1, %(count)s) AS i,
     LATERAL (SELECT clock_timestamp() - interval '10 days' - i * interval '1 s') AS at(t)
"""


def test_retention_runs_beside_claims_without_a_failed_doubled_or_lost_job(cluster, sql):
    sql.execute(INSERT_OLD, {"count": OLD})
    for name in ("d1", "d2"):
        cluster.dispatcher(name)
    cluster.worker("w1", concurrency=4)
    insert_jobs(sql, count=NEW, start=3, spread=12)

    # Retention in its own process, run again and again while the new jobs come due, in
    # batches of 200 (150 statements for the old jobs) with a short pause.
    env = {
        **cluster.env,
        "TEMPO_RETENTION_BATCH_SIZE": "200",
        "TEMPO_RETENTION_BATCH_PAUSE_SECONDS": "0.02",
        "TEMPO_RETENTION_ROLLUP_DELAY_SECONDS": "0",
    }
    runs = 0
    deadline = time.monotonic() + 60
    first_began = database_now(sql)
    while time.monotonic() < deadline:
        subprocess.run(
            [sys.executable, "manage.py", "retention_run"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        runs += 1
        if runs == 1:
            first_ended = database_now(sql)
        if outcome(sql).get("succeeded", 0) >= NEW and runs >= 2:
            break

    wait_for(lambda: outcome(sql).get("succeeded", 0) == NEW, timeout=60, message="new jobs done")
    claimed_meanwhile = sql.execute(
        "SELECT count(*) FROM tasksapp_job WHERE claimed_at BETWEEN %s AND %s",
        [first_began, first_ended],
    ).fetchone()[0]
    assert claimed_meanwhile > 0  # the removal of the old jobs overlapped claims
    assert outcome(sql) == {"succeeded": NEW}  # every old job gone, every new one done
    assert sql.execute("SELECT max(attempts) FROM tasksapp_job").fetchone()[0] == 1
    effects = effect_counts(sql)
    assert len(effects) == NEW and set(effects.values()) == {1}
    rolled = sql.execute(
        "SELECT sum(jobs) FROM tasksapp_jobrollup WHERE span = 3600 AND state = 'succeeded'"
    ).fetchone()[0]
    assert rolled >= OLD  # the removed jobs are in the rollups
