"""Scheduled jobs out of the trigram indexes: what a text search among them would cost.

    python -m bench.search.scheduled [--scheduled 20000 200000] [--runs 5]

The alternative that decision 0019 measured and refused: indexes that leave scheduled
jobs out too. A text search would then read the scheduled jobs by a scan of them all.
For each size, a database of the bench's own holds that many scheduled jobs (the
payloads and keys of bench/search/data.py, due one a second from now) and no trigram
index; the scheduled part of a search (`state = 'scheduled'` and the text, the list's
order, a page of 51) runs `--runs` times for a text in 20 jobs and for one in none.
Printed: p50 ms and the plan's reading of the jobs table.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

from bench.common import BenchDatabase, table, write_json
from bench.search.data import KEY, PAYLOAD

MIGRATION = importlib.import_module("tasksapp.migrations.0023_job_text_search")
INSERT = f"""
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT 'billing.charge', {PAYLOAD}, now() + i * interval '1 s', 'scheduled', 0, 5, '{{}}',
    'at_least_once', {KEY}, 0, '', '', '[]'
FROM generate_series(1, %(n)s) AS i
"""
SCHEDULED_PART = """
SELECT id FROM tasksapp_job
WHERE state = 'scheduled'
  AND (last_error ILIKE %(text)s OR idempotency_key ILIKE %(text)s
       OR payload::text ILIKE %(text)s)
ORDER BY run_at DESC, id DESC LIMIT 51
"""
TEXTS = {"a customer id": "%cus_00031337%", "found nowhere": "%zq-404%"}


def measure(conn, runs: int) -> dict[str, dict]:
    figures = {}
    for name, text in TEXTS.items():
        rows = len(conn.execute(SCHEDULED_PART, {"text": text}).fetchall())  # warm
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            conn.execute(SCHEDULED_PART, {"text": text}).fetchall()
            times.append((time.perf_counter() - began) * 1000)
        plan = conn.execute("EXPLAIN " + SCHEDULED_PART, {"text": text}).fetchall()
        scans = [line.strip().lstrip("-> ").split("  ")[0] for (line,) in plan if "Scan" in line]
        figures[name] = {"rows": rows, "p50_ms": statistics.median(times), "plan": scans}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduled", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results = []
    for count in args.scheduled:
        with BenchDatabase("bench_scheduled") as db, db.connect() as conn:
            for name in MIGRATION.INDEXES:
                conn.execute(f"DROP INDEX IF EXISTS {name}")
            conn.execute(INSERT, {"n": count})
            conn.execute("VACUUM ANALYZE tasksapp_job")
            for name, figure in measure(conn, args.runs).items():
                results.append({"scheduled jobs": count, "text": name, **figure})
    print(table(results, ["scheduled jobs", "text", "rows", "p50_ms", "plan"]))
    write_json("search-scheduled", {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
