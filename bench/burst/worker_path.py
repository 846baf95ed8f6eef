"""One worker process's path for a burst, without the broker: its CPU per job and the
time its statements take.

    python -m bench.burst.worker_path [--jobs 20000] [--batch 157] [--rounds 3]

A fresh database gets `--jobs` at-least-once no-op jobs, due and claimed by the
dispatchers' own statement; this process starts and runs them with the worker's
`execute_batch`, `--batch` jobs a message (157: a claim of 5,000 split into 32 messages,
as in `bench.burst`). Each round reports the process's CPU and wall time per job. With
`pg_stat_statements` loaded in the server, the last round also reports the execution time
of each statement the worker sent, by statement: how the start, the record of deferred
starts and the success share the database's part.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

from bench.burst.__main__ import INSERT, NOOP
from bench.common import BenchDatabase, django_on, table

CLAIM_TTL_S = 600  # longer than any round: no lease expires under the bench
STATEMENTS = """
SELECT calls, rows, total_exec_time, max_exec_time,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 70)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND calls >= %s
ORDER BY total_exec_time DESC LIMIT 5
"""


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=157)
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


def claimed_batches(cursor, jobs: int, batch: int) -> list[list[list[float]]]:
    """`jobs` due no-op jobs, claimed by the dispatchers' own statement, as messages of
    [job id, token, run_at in ms] of `batch` jobs each."""
    from tasksapp.engine.store.postgres_sql import CLAIM_DUE

    cursor.execute("TRUNCATE tasksapp_job RESTART IDENTITY CASCADE")
    due = {"handler": NOOP, "at": time.time() - 1, "n": jobs, "delivery": "at_least_once"}
    cursor.execute(INSERT, due)
    cursor.execute("VACUUM ANALYZE tasksapp_job")
    cursor.execute("SELECT id FROM tasksapp_job ORDER BY id")
    ids = [row[0] for row in cursor.fetchall()]
    cursor.execute(CLAIM_DUE, {"owner": "bench", "ttl": CLAIM_TTL_S, "ids": ids, "lead": 0})
    claims = sorted([job_id, token, run_at_ms] for job_id, token, run_at_ms, _ in cursor.fetchall())
    return [claims[i : i + batch] for i in range(0, jobs, batch)]


def reset_statements(cursor) -> None:
    with contextlib.suppress(Exception):  # not loaded: statement_stats says so
        cursor.execute("SELECT pg_stat_statements_reset()")


def statement_stats(cursor, batches: int) -> list[dict] | None:
    """The worker's statements of the last round, or None without pg_stat_statements."""
    try:
        cursor.execute(STATEMENTS, [batches])
    except Exception:  # not loaded (shared_preload_libraries): the CPU figures stand alone
        return None
    return [
        {"calls": c, "rows": r, "total_ms": round(t, 1), "max_ms": round(m, 2), "statement": q}
        for c, r, t, m, q in cursor.fetchall()
    ]


def main() -> None:
    args = parse()
    with BenchDatabase("tempo_bench_worker_path") as db:
        django_on(db.url)
        from django.db import connection

        from tasksapp.engine.sessions import use_engine_sessions
        from tasksapp.engine.worker.executor import execute_batch, warm_up
        from tasksapp.engine.worker.lease_keeper import lease_keeper

        use_engine_sessions()
        lease_keeper()
        warm_up()
        # Not available on every server: the CPU figures stand alone then.
        with connection.cursor() as cursor, contextlib.suppress(Exception):
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        rows, statements = [], None
        for round_number in range(1, args.rounds + 1):
            with connection.cursor() as cursor:
                batches = claimed_batches(cursor, args.jobs, args.batch)
                reset_statements(cursor)
            cpu, wall = time.process_time(), time.perf_counter()
            started = sum(execute_batch(batch) for batch in batches)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM tasksapp_job WHERE state = 'succeeded'")
                succeeded = cursor.fetchone()[0]
                statements = statement_stats(cursor, len(batches))
            rows.append(
                {
                    "round": round_number,
                    "jobs": args.jobs,
                    "batch": args.batch,
                    "started": started,
                    "succeeded": succeeded,
                    "cpu_us_per_job": round(cpu / args.jobs * 1e6, 1),
                    "wall_us_per_job": round(wall / args.jobs * 1e6, 1),
                }
            )
        print(table(rows, list(rows[0])))
        if statements:
            print(table(statements, list(statements[0])))
        connection.close()
    os._exit(0)  # the lease keeper's threads are daemons; nothing to wait for


if __name__ == "__main__":
    main()
