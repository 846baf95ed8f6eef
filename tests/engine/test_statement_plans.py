"""The hot statements (a claim, a limited claim, a start, a success) reach their rows by
one primary-key probe per id, whatever the table's statistics say. Planned freely with
statistics taken while no job was due or leased (a new table, a flood newer than its
statistics), each one scanned every due or leased row instead: 10-270 ms a statement
where a probe takes 1-2 ms (bench/claim_plan)."""

import json

import pytest
from django.db import connection

from tasksapp.engine.sql import JOB_TABLE
from tasksapp.engine.store import postgres_sql as sql

pytestmark = pytest.mark.django_db

JOBS = 3000
INSERT_FINISHED = f"""
INSERT INTO {JOB_TABLE} (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors,
    queue, priority, concurrency_key)
SELECT 'tests.handlers.recording.noop', '{{}}', now() - interval '1 s', 'succeeded', 1, 5,
    '{{}}', 'at_least_once', md5(i::text), 0, '', '', '[]', 'api', 5, ''
FROM generate_series(1, %s) AS i
"""
PARTIAL_INDEXES = {"job_due_idx", "job_lease_idx"}


def stale_table(state: str) -> list[int]:
    """JOBS jobs, analysed while all were finished, then all put in `state`: the
    statistics say none is due or leased. Their ids, in order."""
    with connection.cursor() as cursor:
        cursor.execute(INSERT_FINISHED, [JOBS])
        cursor.execute(f"ANALYZE {JOB_TABLE}")
        cursor.execute(f"UPDATE {JOB_TABLE} SET state = %s RETURNING id", [state])
        return sorted(row[0] for row in cursor.fetchall())


def explained(statement: str, params: dict) -> list[dict]:
    """The nodes of the statement's executed plan that read or update the job table."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return job_table_nodes(plan)


def job_table_nodes(plan: dict) -> list[dict]:
    found = [plan] if plan.get("Relation Name") == JOB_TABLE else []
    for child in plan.get("Plans", []):
        found += job_table_nodes(child)
    return found


def probe_loops(nodes: list[dict]) -> list[int]:
    return [n["Actual Loops"] for n in nodes if n.get("Index Name") == f"{JOB_TABLE}_pkey"]


def reached_by_probes(nodes: list[dict], count: int) -> bool:
    """One probe per id; for many ids on this small table the planner may rightly read
    the whole table once instead (it knows the table's size): never a partial index."""
    return probe_loops(nodes) == [count] or (count > 1 and not probe_loops(nodes))


def updated(nodes: list[dict]) -> int:
    return next(n for n in nodes if n["Node Type"] == "ModifyTable")["Actual Rows"]


def scanned_partial_indexes(nodes: list[dict]) -> set[str]:
    return {n["Index Name"] for n in nodes if n.get("Index Name") in PARTIAL_INDEXES}


@pytest.mark.parametrize("limit", [None, 20])
def test_a_limited_claim_probes_its_candidates(limit):
    ids = stale_table("scheduled")[:100]
    params = {
        "queue": "api",
        "ids": ids,
        "owner": "d1",
        "ttl": 10,
        "lead": 0.04,
        "room": 10,
        "limit": limit,
        "key_limit": None,
    }
    nodes = explained(sql.CLAIM_LIMITED, params)
    assert not scanned_partial_indexes(nodes)
    assert probe_loops(nodes) == [100, 10]  # each candidate, each claimed
    assert updated(nodes) == 10  # the room asked for, claimed


@pytest.mark.parametrize("count", [1, 100])
def test_a_claim_probes_its_ids(count):
    ids = stale_table("scheduled")[:count]
    nodes = explained(sql.CLAIM_DUE, {"ids": ids, "owner": "d1", "ttl": 10, "lead": 0.04})
    assert not scanned_partial_indexes(nodes)
    assert reached_by_probes(nodes, count)
    assert updated(nodes) == count


@pytest.mark.parametrize("count", [1, 100])
def test_a_start_and_a_success_probe_their_ids(count):
    ids = stale_table("claimed")[:count]
    start = {"ids": ids, "tokens": [0] * count, "worker": "w1", "ttl": 6, "lead": 1}
    nodes = explained(sql.START_CLAIMED, start)
    assert not scanned_partial_indexes(nodes)
    assert reached_by_probes(nodes, count)
    assert updated(nodes) == count  # now running
    finish = {"ids": ids, "tokens": [0] * count, "results": [None] * count}
    nodes = explained(sql.SUCCEED_RUNNING, {**finish, "began_ms": [None] * count})
    assert not scanned_partial_indexes(nodes)
    assert reached_by_probes(nodes, count)
    assert updated(nodes) == count
