"""The hot statements (a claim, a limited claim, a start, a success, a renewal) reach
their rows through the primary key, with work linear in their ids, whatever the table's
statistics say. With statistics taken while no job was due or leased (a new table, a
flood newer than its statistics), a statement of one id once scanned every due or
leased row (10-270 ms where a probe takes 1-2 ms), and a start of 250 ids joined to its
tokens went over all 250 for every row of the table (0.6-0.9 s on 10,000 rows;
bench/claim_plan)."""

import json
import re

import psycopg
import pytest
from django.db import connection
from psycopg.types.json import Jsonb

from tasksapp.engine.db import JOB_TABLE
from tasksapp.engine.store import postgres_sql as sql

pytestmark = pytest.mark.django_db

JOBS = 10_000
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


def explained(statement: str, params: dict, *, generic: bool = False) -> dict:
    """The statement's executed plan. `generic`: the plan made without the parameters'
    values, as a prepared statement (the worker's start and success) gets after its
    first executions."""
    with connection.cursor() as cursor:
        if not generic:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        else:
            names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", statement)))
            numbered = statement
            for number, name in enumerate(names, start=1):
                numbered = numbered.replace(f"%({name})s", f"${number}")
            cursor.execute(f"PREPARE generic_probe AS {numbered}")
            cursor.execute("SET plan_cache_mode = force_generic_plan")
            values = psycopg.ClientCursor(connection.connection).mogrify(
                ", ".join(["%s"] * len(names)), [params[name] for name in names]
            )
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE generic_probe({values})")
        raw = cursor.fetchone()[0]
        if generic:
            cursor.execute("DEALLOCATE generic_probe")
            cursor.execute("RESET plan_cache_mode")
    return (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]


def all_nodes(plan: dict) -> list[dict]:
    return [plan] + [node for child in plan.get("Plans", []) for node in all_nodes(child)]


def job_table_reads(plan: dict) -> list[dict]:
    return [
        n
        for n in all_nodes(plan)
        if n.get("Relation Name") == JOB_TABLE and "Scan" in n["Node Type"]
    ]


def by_primary_key(plan: dict) -> bool:
    """Every read of the job table goes through its primary key."""
    reads = job_table_reads(plan)
    return bool(reads) and all(n.get("Index Name") == f"{JOB_TABLE}_pkey" for n in reads)


def linear(plan: dict, count: int) -> bool:
    """No part of the plan runs once per row of the table: none more often than once
    per id, and no join compares every id with every row."""
    nodes = all_nodes(plan)
    return all(n["Actual Loops"] <= max(count, 1) for n in nodes) and all(
        n.get("Rows Removed by Join Filter", 0) <= count for n in nodes
    )


def updated(plan: dict) -> int:
    """Rows the statement's update of the job table changed."""
    return next(
        n
        for n in all_nodes(plan)
        if n["Node Type"] == "ModifyTable" and n.get("Relation Name") == JOB_TABLE
    )["Actual Rows"]


def scanned_partial_indexes(plan: dict) -> set[str]:
    return {n["Index Name"] for n in all_nodes(plan) if n.get("Index Name") in PARTIAL_INDEXES}


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
    plan = explained(sql.CLAIM_LIMITED, params)
    assert not scanned_partial_indexes(plan)
    # Candidates and claims through the primary key; the queue's jobs in flight counted
    # from the index kept for that count.
    assert {n.get("Index Name") for n in job_table_reads(plan)} <= {
        f"{JOB_TABLE}_pkey",
        "job_active_queue_idx",
    }
    assert all(n["Actual Loops"] <= 100 for n in all_nodes(plan))
    assert updated(plan) == 10  # the room asked for, claimed


@pytest.mark.parametrize("count", [1, 250, 2000])
def test_a_claim_reaches_its_ids_by_primary_key(count):
    ids = stale_table("scheduled")[:count]
    plan = explained(sql.CLAIM_DUE, {"ids": ids, "owner": "d1", "ttl": 10, "lead": 0.04})
    assert not scanned_partial_indexes(plan)
    assert by_primary_key(plan)
    assert linear(plan, count)
    assert updated(plan) == count


@pytest.mark.parametrize("generic", [False, True], ids=["custom plan", "generic plan"])
@pytest.mark.parametrize("count", [1, 250, 2000])
def test_a_start_a_renewal_and_a_success_reach_their_ids_by_primary_key(count, generic):
    ids = stale_table("claimed")[:count]
    leases = [(job_id, 0) for job_id in ids]
    start = {**sql.fenced_params(leases), "worker": "w1", "ttl": 6, "lead": 1}
    renewal = {**sql.fenced_params(leases), "ttl": 6}
    success = sql.outcome_params([(job_id, 0, {"n": job_id}, None) for job_id in ids])
    for statement, params in [
        (sql.START_CLAIMED, start),
        (sql.RENEW_RUNNING, renewal),
        (sql.SUCCEED_RUNNING, success),
    ]:
        plan = explained(statement, params, generic=generic)
        conditions = " ".join(n.get("Index Cond", "") for n in job_table_reads(plan))
        assert ("$" in conditions) == generic  # planned without the ids' values, or with them
        assert not scanned_partial_indexes(plan)
        assert by_primary_key(plan)
        assert linear(plan, count)
        assert updated(plan) == count  # running, renewed, then succeeded


@pytest.mark.parametrize("generic", [False, True], ids=["custom plan", "generic plan"])
@pytest.mark.parametrize("count", [1, 250, 2000])
def test_deferred_starts_and_their_successes_reach_their_ids_by_primary_key(count, generic):
    """At-least-once jobs read (their start deferred), started later, or started and
    ended in one update: each statement through the primary key, once per id."""
    ids = stale_table("claimed")[:count]
    with connection.cursor() as cursor:  # claims whose leases outlive a run lease: deferrable
        cursor.execute(
            f"UPDATE {JOB_TABLE} SET lease_expires_at = now() + interval '1 hour' "
            "WHERE id = ANY(%s)",
            [ids],
        )
    leases = [(job_id, 0) for job_id in ids]
    deferring = {**sql.fenced_params(leases), "worker": "w1", "ttl": 6, "lead": 1}
    plan = explained(sql.START_DEFERRING, deferring, generic=generic)
    assert not scanned_partial_indexes(plan) and by_primary_key(plan) and linear(plan, count)
    assert plan["Actual Rows"] == count  # every job read, none started
    held = {**sql.fenced_params(leases), "began": Jsonb({}), "worker": "w1", "ttl": 6}
    success = sql.outcome_params([(job_id, 0, None, None) for job_id in ids], "w1")
    for statement, params in [(sql.START_HELD, held), (sql.SUCCEED_RUNNING, success)]:
        plan = explained(statement, params, generic=generic)
        assert not scanned_partial_indexes(plan)
        assert by_primary_key(plan)
        assert linear(plan, count)
        assert updated(plan) == count  # running, then succeeded


def test_a_token_that_does_not_match_leaves_its_job_alone():
    ids = stale_table("claimed")[:3]
    leases = [(ids[0], 0), (ids[1], 7), (ids[2], 0)]  # the second one's token is stale
    start = {**sql.fenced_params(leases), "worker": "w1", "ttl": 6, "lead": 1}
    with connection.cursor() as cursor:
        cursor.execute(sql.START_CLAIMED, start)
        assert sorted(row[0] for row in cursor.fetchall()) == [ids[0], ids[2]]
        success = sql.outcome_params([(ids[0], 0, {"n": 1}, None), (ids[2], 0, None, None)])
        cursor.execute(sql.SUCCEED_RUNNING, success)
        cursor.execute(f"SELECT id, state, result FROM {JOB_TABLE} WHERE id = ANY(%s)", [ids])
        rows = {job_id: (state, result) for job_id, state, result in cursor.fetchall()}
    assert rows[ids[1]][0] == "claimed"
    assert rows[ids[0]][0] == rows[ids[2]][0] == "succeeded"
    result = rows[ids[0]][1]
    assert (json.loads(result) if isinstance(result, str) else result) == {"n": 1}
    assert rows[ids[2]][1] is None  # a handler that returned nothing stores NULL


# The trigram index on the jobs table (the key's and the payload's are on their search
# rows, migration 0028, which no statement here writes).
TRIGRAM_INDEXES = ("job_error_trgm_idx",)


def plan_shape(statement: str, params: dict) -> list[tuple]:
    """The plan's nodes (their type, relation and index), as planned, not run."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return [(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in all_nodes(plan)]


def test_the_text_search_indexes_leave_the_hot_statements_plans_as_they_were():
    """The claim, the start, the renewal, the success and the failure are planned alike
    with the last error's trigram index and without it (dropped in this test's
    transaction)."""
    ids = stale_table("claimed")[:250]
    leases = [(job_id, 0) for job_id in ids]
    failure = {"state": "failed", "delay": 1, "error": "x", "kind": "error", "traceback": None}
    statements = [
        (sql.CLAIM_DUE, {"ids": ids, "owner": "d1", "ttl": 10, "lead": 0.04}),
        (sql.START_CLAIMED, {**sql.fenced_params(leases), "worker": "w1", "ttl": 6, "lead": 1}),
        (sql.RENEW_RUNNING, {**sql.fenced_params(leases), "ttl": 6}),
        (sql.SUCCEED_RUNNING, sql.outcome_params([(i, 0, None, None) for i in ids], "w1")),
        (sql.FAIL_RUNNING, {**failure, "id": ids[0], "token": 0, "began_ms": None}),
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_class WHERE relname = ANY(%s)", [list(TRIGRAM_INDEXES)]
        )
        assert cursor.fetchone()[0] == len(TRIGRAM_INDEXES)
    with_indexes = [plan_shape(statement, params) for statement, params in statements]
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX " + ", ".join(TRIGRAM_INDEXES))
    without = [plan_shape(statement, params) for statement, params in statements]
    assert with_indexes == without
    read = {index for shape in with_indexes for _, _, index in shape}
    assert f"{JOB_TABLE}_pkey" in read and not read & set(TRIGRAM_INDEXES)
