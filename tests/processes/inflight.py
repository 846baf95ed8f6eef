"""Work in flight for the kill and outage tests: jobs whose handler records its effect
and then blocks (tests.handlers.recording.record_then_block), so that a kill lands
while it runs, and the checks of what each delivery mode then guarantees."""

from __future__ import annotations

import json

import psycopg

from tests.handlers.recording import KEYED_EFFECTS_TABLE, STARTED_TABLE
from tests.processes.support import wait_for

BLOCKING = "tests.handlers.recording.record_then_block"
MODES = ("transactional", "at_least_once", "at_most_once")


def create_tables(conn: psycopg.Connection) -> None:
    conn.execute(KEYED_EFFECTS_TABLE)
    conn.execute(STARTED_TABLE)
    conn.execute("TRUNCATE test_keyed_effects, test_started")


def insert_blocking(
    conn: psycopg.Connection,
    *,
    count: int,
    delivery: str,
    start: float = 1.0,
    block: float = 600.0,
    key: str = "inflight",
) -> list[int]:
    """`count` jobs due `start` s from now whose first attempt blocks for `block` s."""
    rows = conn.execute(
        """
        INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
            retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error,
            errors)
        SELECT %(handler)s, %(payload)s, clock_timestamp() + make_interval(secs => %(start)s),
            'scheduled', 0, 3, '{"delays": [0.5]}', %(delivery)s::text,
            %(key)s || ':' || %(delivery)s::text || ':' || i, 0, '', '', '[]'
        FROM generate_series(1, %(count)s) AS i
        RETURNING id
        """,
        {
            "handler": BLOCKING,
            "payload": json.dumps({"block": block}),
            "start": start,
            "delivery": delivery,
            "key": key,
            "count": count,
        },
    ).fetchall()
    return sorted(row[0] for row in rows)


def wait_until_running(conn: psycopg.Connection, ids: list[int], *, timeout: float = 30) -> None:
    """Every job's handler has begun its first attempt (and blocks there now)."""
    wait_for(
        lambda: conn.execute(
            "SELECT count(DISTINCT job_id) FROM test_started WHERE attempt = 1"
            " AND job_id = ANY(%s)",
            [ids],
        ).fetchone()[0]
        == len(ids),
        timeout=timeout,
        message=f"all {len(ids)} handlers running",
    )


def database_now(conn: psycopg.Connection):
    return conn.execute("SELECT clock_timestamp()").fetchone()[0]


def states(conn: psycopg.Connection, ids: list[int]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT state, count(*) FROM tasksapp_job WHERE id = ANY(%s) GROUP BY state", [ids]
    ).fetchall()
    return dict(rows)


def wait_for_state(conn, ids: list[int], state: str, *, timeout: float) -> None:
    try:
        wait_for(
            lambda: states(conn, ids) == {state: len(ids)},
            timeout=timeout,
            message=f"all {len(ids)} {state}",
        )
    except AssertionError as exc:  # say where the jobs were instead
        raise AssertionError(f"{exc}; their states: {states(conn, ids)}") from None


def jobs(conn: psycopg.Connection, ids: list[int]) -> dict[int, dict]:
    rows = conn.execute(
        "SELECT id, state, attempts, idempotency_key, errors, lease_token FROM tasksapp_job"
        " WHERE id = ANY(%s)",
        [ids],
    ).fetchall()
    return {
        row[0]: {
            "state": row[1],
            "attempts": row[2],
            "key": row[3],
            "errors": row[4],
            "token": row[5],
        }
        for row in rows
    }


def effects(conn: psycopg.Connection, ids: list[int]) -> dict[int, list[tuple[int, str]]]:
    """Committed effects per job: (attempt, idempotency key) in order."""
    found: dict[int, list[tuple[int, str]]] = {job_id: [] for job_id in ids}
    for job_id, attempt, key in conn.execute(
        "SELECT job_id, attempt, idempotency_key FROM test_keyed_effects"
        " WHERE job_id = ANY(%s) ORDER BY id",
        [ids],
    ).fetchall():
        found[job_id].append((attempt, key))
    return found


def starts(conn: psycopg.Connection, ids: list[int]) -> dict[int, list[int]]:
    """The attempts whose handler began, per job."""
    found: dict[int, list[int]] = {job_id: [] for job_id in ids}
    for job_id, attempt in conn.execute(
        "SELECT job_id, attempt FROM test_started WHERE job_id = ANY(%s) ORDER BY id", [ids]
    ).fetchall():
        found[job_id].append(attempt)
    return found


def wait_for_outcome(conn, ids: list[int], delivery: str, *, timeout: float) -> None:
    """A killed first attempt ends in `succeeded` (run again) or, at most once, `lost`."""
    wait_for_state(
        conn, ids, "lost" if delivery == "at_most_once" else "succeeded", timeout=timeout
    )


def attempts_of(job: dict, kind: str) -> list[int]:
    """The attempts of a job's error entries of one kind."""
    return [entry["attempt"] for entry in job["errors"] if entry["kind"] == kind]


def assert_killed_mid_run(conn, ids: list[int], delivery: str) -> None:
    """What each delivery mode guarantees for jobs whose worker died in the handler."""
    rows, done, began = jobs(conn, ids), effects(conn, ids), starts(conn, ids)
    for job_id in ids:
        job = rows[job_id]
        if delivery == "transactional":
            # the first run's effect rolled back with its transaction: it ran again with
            # its attempt given back, so one attempt counted
            assert attempts_of(job, "lost_run") == [1], (job_id, job["errors"])
            assert attempts_of(job, "lease_expired") == [], (job_id, job["errors"])
            assert job["state"] == "succeeded" and job["attempts"] == 1, (job_id, job)
            assert began[job_id] == [1, 1], (job_id, began[job_id])
            assert done[job_id] == [(1, job["key"])], (job_id, done[job_id])
            continue
        assert attempts_of(job, "lease_expired") == [1], (job_id, job["errors"])
        if delivery == "at_least_once":
            assert job["state"] == "succeeded" and job["attempts"] == 2, (job_id, job)
            assert began[job_id] == [1, 2], (job_id, began[job_id])
            assert done[job_id] == [(1, job["key"]), (2, job["key"])], (job_id, done[job_id])
        else:
            assert job["state"] == "lost" and job["attempts"] == 1, (job_id, job)
            assert began[job_id] == [1], (job_id, began[job_id])
            assert done[job_id] == [(1, job["key"])], (job_id, done[job_id])
