"""Jobs with routes for the routing process tests and bench/routing, and the checks on
the handlers' own records (tests.handlers.recording.record_run)."""

from __future__ import annotations

import json

import psycopg

from tests.handlers.recording import RUNS_TABLE

RECORD_RUN = "tests.handlers.recording.record_run"

INSERT_ROUTED = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors,
    queue, priority, concurrency_key)
SELECT %(handler)s, %(payload)s, clock_timestamp() + make_interval(secs => %(start)s),
    'scheduled', 0, 3, '{"delays": [0.5]}', %(delivery)s, md5(random()::text || i), 0, '',
    '', '[]', %(queue)s, %(priority)s,
    CASE WHEN %(keys)s::int = 0 THEN '' ELSE 'k' || (i %% %(keys)s::int)::text END
FROM generate_series(1, %(count)s) AS i
RETURNING id
"""


def create_runs_table(conn: psycopg.Connection) -> None:
    conn.execute(RUNS_TABLE)
    conn.execute("TRUNCATE test_runs")


def insert_routed(
    conn: psycopg.Connection,
    *,
    count: int,
    queue: str = "default",
    priority: int = 5,
    start: float = 1.0,
    handler: str = RECORD_RUN,
    payload: dict | None = None,
    delivery: str = "at_least_once",
    keys: int = 0,
) -> list[int]:
    """`count` jobs of `queue` due `start` s from now; with `keys`, spread over that many
    concurrency keys (k0, k1, …), else with none."""
    rows = conn.execute(
        INSERT_ROUTED,
        {
            "handler": handler,
            "payload": json.dumps(payload or {}),
            "start": start,
            "delivery": delivery,
            "queue": queue,
            "priority": priority,
            "keys": keys,
            "count": count,
        },
    ).fetchall()
    return sorted(row[0] for row in rows)


def most_at_once(conn: psycopg.Connection, *, where: str = "true") -> int:
    """The most handlers running at the same moment, from their own begin and end records
    (an end at the same moment as a begin counts first)."""
    (most,) = conn.execute(
        f"""
        WITH runs AS (SELECT * FROM test_runs r JOIN tasksapp_job j ON j.id = r.job_id
                      WHERE {where}),
        events AS (
            SELECT began_at AS at, 1 AS delta FROM runs
            UNION ALL SELECT coalesce(ended_at, 'infinity'), -1 FROM runs
        )
        SELECT coalesce(max(running), 0) FROM (
            SELECT sum(delta) OVER (ORDER BY at, delta) AS running FROM events) AS s
        """
    ).fetchone()
    return most
