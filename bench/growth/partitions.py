"""Removing a day of finished jobs: batched deletes (the product's DELETE_FINISHED, 5,000
rows a statement) from the jobs table against dropping a day partition of the same rows
in a copy of the table partitioned by day (PostgreSQL declarative partitioning, by
`created_at`, which never changes). Same rows in both: `days` days of `rows_per_day`
finished jobs. Measured for each: elapsed time, WAL written, the vacuum the removal leaves
(VACUUM's time and WAL), and the latency of a claim (the product's claim shape, by id)
of a probe job in the same table, every 10 ms, while the removal runs and at rest.

The partitioned table exists only here: PostgreSQL requires every unique index of a
partitioned table to include the partition key, so `idempotency_key` could not stay
unique across the table (the planner's and the API's `ON CONFLICT` rely on it), and a
claim by id cannot be pruned to one partition.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import threading
import time

from bench.common import BenchDatabase, percentile, write_json

FILL = """
INSERT INTO {table} (handler, payload, run_at, created_at, claimed_at, started_at,
    finished_at, state, attempts, max_attempts, retry_policy, delivery, time_limit,
    idempotency_key, lease_token, claimed_by, lease_expires_at, last_error, errors, result)
SELECT 'tasksapp.recurring.handlers.sync_member',
    jsonb_build_object('member_id', i, 'recurring_task_id', 1, 'occurrence', %(day)s),
    t, t - interval '1 day', t - interval '40 ms', t + interval '3 ms', t + interval '80 ms',
    'succeeded', 1, 3, '{{}}', 'transactional', NULL, 'plan:1:' || %(day)s || ':' || i, 1,
    'sim', NULL, '', '[]', NULL
FROM generate_series(0, %(rows)s - 1) AS i,
     LATERAL (SELECT %(start)s::timestamptz + i * (interval '1 day' / %(rows)s)) AS at(t)
"""
PARTITIONED = """
CREATE TABLE growth_job (LIKE tasksapp_job INCLUDING DEFAULTS) PARTITION BY RANGE (created_at);
ALTER TABLE growth_job ADD PRIMARY KEY (id, created_at);
CREATE UNIQUE INDEX ON growth_job (idempotency_key, created_at);
CREATE INDEX ON growth_job (run_at) WHERE state IN ('scheduled', 'failed');
CREATE INDEX ON growth_job (lease_expires_at) WHERE state IN ('claimed', 'running');
CREATE INDEX ON growth_job (state, run_at);
CREATE INDEX ON growth_job (handler, run_at);
CREATE INDEX ON growth_job (started_at) INCLUDE (run_at, attempts, state);
CREATE INDEX ON growth_job (finished_at) INCLUDE (state);
CREATE INDEX ON growth_job (run_at, id);
"""
PARTITION = """
CREATE TABLE {name} PARTITION OF growth_job FOR VALUES FROM ('{start}') TO ('{end}')
"""
CLAIM = """
UPDATE {table} j SET state = 'claimed', lease_token = j.lease_token + 1,
    claimed_at = clock_timestamp()
FROM unnest(%(ids)s::bigint[]) AS t(id)
WHERE j.id = t.id AND j.state IN ('scheduled', 'failed') AND j.run_at <= clock_timestamp()
"""
UNCLAIM = "UPDATE {table} SET state = 'scheduled' WHERE id = %(id)s"
PROBE_INSERT = """
INSERT INTO {table} (id, handler, payload, run_at, created_at, state, attempts,
    max_attempts, retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error,
    errors)
VALUES (%(id)s, 'probe', '{{}}', clock_timestamp(), clock_timestamp(), 'scheduled', 0, 1, '{{}}',
    'transactional', 'probe:' || %(n)s, 0, '', '', '[]')
RETURNING id
"""


class ClaimProbe(threading.Thread):
    """Claims (and hands back) one due probe job every 10 ms on its own connection."""

    def __init__(self, url: str, table: str, job_id: int) -> None:
        super().__init__(daemon=True)
        self.url, self.table, self.job_id = url, table, job_id
        self.latencies: list[float] = []
        self.running = True

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while self.running:
                began = time.perf_counter()
                conn.execute(CLAIM.format(table=self.table), {"ids": [self.job_id]})
                self.latencies.append((time.perf_counter() - began) * 1000)
                conn.execute(UNCLAIM.format(table=self.table), {"id": self.job_id})
                time.sleep(0.01)

    def stop(self) -> list[float]:
        self.running = False
        self.join()
        return self.latencies


def wal(conn) -> int:
    return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def measured(conn, url: str, table: str, probe_id: int, remove) -> dict:
    """Run `remove` with the claim probe going; then the vacuum it leaves."""
    conn.execute("CHECKPOINT")
    rest = ClaimProbe(url, table, probe_id)
    rest.start()
    time.sleep(3)
    at_rest = rest.stop()
    probe = ClaimProbe(url, table, probe_id)
    probe.start()
    wal_before, began = wal(conn), time.perf_counter()
    statements = remove()
    seconds, wal_bytes = time.perf_counter() - began, wal(conn) - wal_before
    during = probe.stop()
    wal_before, began = wal(conn), time.perf_counter()
    conn.execute(f"VACUUM {table}")
    vacuum_s, vacuum_wal = time.perf_counter() - began, wal(conn) - wal_before
    return {
        "seconds": seconds,
        "statements": statements,
        "wal_mb": wal_bytes / 2**20,
        "vacuum_s": vacuum_s,
        "vacuum_wal_mb": vacuum_wal / 2**20,
        "claim_p50_rest_ms": percentile(at_rest, 0.5),
        "claim_p99_rest_ms": percentile(at_rest, 0.99),
        "claim_p50_during_ms": percentile(during, 0.5) if during else None,
        "claim_p99_during_ms": percentile(during, 0.99) if during else None,
        "claim_max_during_ms": max(during) if during else None,
        "claims_during": len(during),
        "claim_mean_rest_ms": statistics.fmean(at_rest),
    }


def run(*, db_prefix: str, rows_per_day: int = 100_000, days: int = 8) -> dict:
    """Both ways of removing the oldest of `days` days of `rows_per_day` jobs."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")
    django.setup()
    from tasksapp.retention import sql as retention_sql

    with BenchDatabase(f"{db_prefix}_partitions") as db, db.connect() as conn:
        today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        first = today - dt.timedelta(days=days + 7)
        conn.execute(PARTITIONED)
        for day in range(days):
            start = first + dt.timedelta(days=day)
            conn.execute(
                PARTITION.format(
                    name=f"growth_job_d{day}", start=start - dt.timedelta(days=1), end=start
                )
            )
            params = {"day": day, "rows": rows_per_day, "start": start}
            conn.execute(FILL.format(table="tasksapp_job"), params)
        conn.execute("INSERT INTO growth_job SELECT * FROM tasksapp_job")  # the same rows
        conn.execute(
            PARTITION.format(
                name="growth_job_now",
                start=today - dt.timedelta(days=2),
                end=today + dt.timedelta(days=2),
            )
        )
        probes = {}
        for table in ("tasksapp_job", "growth_job"):
            params = {"n": table, "id": 2**40}
            probes[table] = conn.execute(PROBE_INSERT.format(table=table), params).fetchone()[0]
            conn.execute(f"VACUUM ANALYZE {table}")
        oldest_end = first + dt.timedelta(days=1)

        def delete_batches() -> int:
            params = {
                "handler": "tasksapp.recurring.handlers.sync_member", "task": "1",
                "state": "succeeded", "before": oldest_end, "now": today, "batch": 5000,
            }  # fmt: skip
            statements = 0
            while True:
                statements += 1
                if conn.execute(retention_sql.DELETE_FINISHED, params).rowcount < 5000:
                    return statements

        def drop_partition() -> int:
            conn.execute("ALTER TABLE growth_job DETACH PARTITION growth_job_d0")
            conn.execute("DROP TABLE growth_job_d0")
            return 2

        result = {
            "rows_per_day": rows_per_day,
            "days": days,
            "batched_deletes": measured(
                conn, db.url, "tasksapp_job", probes["tasksapp_job"], delete_batches
            ),
            "drop_partition": measured(
                conn, db.url, "growth_job", probes["growth_job"], drop_partition
            ),
        }
        for name in ("batched_deletes", "drop_partition"):
            print(f"  {name}: {result[name]}", flush=True)
        return result


if __name__ == "__main__":
    prefix = os.environ.get("BENCH_DB_PREFIX", "tempo_bench_growth")
    rows = int(os.environ.get("BENCH_ROWS_PER_DAY", "100000"))
    result = run(db_prefix=prefix, rows_per_day=rows)
    print(
        write_json("growth-partitions", {"command": "python -m bench.growth.partitions", **result})
    )
