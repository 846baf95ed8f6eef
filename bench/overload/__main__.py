"""Overload: more work due than the workers start within a claim's lifetime.

    python -m bench.overload [--jobs 1200] [--seconds 0.2] [--slots 8] [--stop-seconds 30]

Two scenarios, each on a fresh database with one dispatcher and one threads worker of
`--slots` slots (claim lifetime 10 s, as by default):

- slow handlers: `--jobs` jobs due at once whose handlers sleep `--seconds` each, so the
  last of them waits in the broker many claim lifetimes;
- a frozen worker: the worker stopped (SIGSTOP) for `--stop-seconds` (3 claim lifetimes)
  while jobs fall due, then resumed.

Printed per scenario: how long the run took against the workers' capacity (jobs x seconds
/ slots), the claims made beyond one per job (work returned and claimed again), and the
jobs run more than once (must be 0). Run it from another checkout to compare trees.
"""

from __future__ import annotations

import argparse
import signal
import time

from bench.common import BenchDatabase, bench_cluster, machine, table, write_json
from tests.processes.support import EFFECTS_TABLE, insert_jobs, wait_for

SLOW = "tests.handlers.recording.record_slowly"
RECORD = "tests.handlers.recording.record"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1200)
    parser.add_argument("--seconds", type=float, default=0.2, help="each slow handler's sleep")
    parser.add_argument("--slots", type=int, default=8, help="the worker's threads")
    parser.add_argument("--stop-seconds", type=float, default=30.0)
    parser.add_argument("--frozen-jobs", type=int, default=400)
    return parser.parse_args()


def _outcome(conn, n: int) -> dict:
    succeeded, claims = conn.execute(
        "SELECT count(*) FILTER (WHERE state = 'succeeded'), coalesce(sum(lease_token), 0)"
        " FROM tasksapp_job"
    ).fetchone()
    doubled = conn.execute(
        "SELECT count(*) FROM (SELECT job_id FROM test_effects GROUP BY job_id"
        " HAVING count(*) > 1) d"
    ).fetchone()[0]
    return {"succeeded": succeeded, "claims_beyond_one": int(claims) - n, "doubled": doubled}


def slow_handlers(args) -> dict:
    n, capacity = args.jobs, args.jobs * args.seconds / args.slots

    def load(conn, cluster) -> None:
        insert_jobs(conn, count=n, start=1, spread=0.01, handler=SLOW)
        payload = f'{{"seconds": {args.seconds}}}'
        conn.execute("UPDATE tasksapp_job SET payload = %s::jsonb", [payload])

    return _timed("slow handlers", n, args.slots, capacity, load)


def frozen_worker(args) -> dict:
    n = args.frozen_jobs

    def load(conn, cluster) -> None:
        cluster.kill("w1", signal.SIGSTOP)
        try:
            insert_jobs(conn, count=n, start=0.5, spread=2, handler=RECORD)
            time.sleep(args.stop_seconds)
        finally:
            cluster.kill("w1", signal.SIGCONT)

    return _timed("frozen worker", n, args.slots, args.stop_seconds, load)


def _timed(name: str, n: int, slots: int, capacity_s: float, load) -> dict:
    with BenchDatabase("overload") as db, db.connect() as conn:
        conn.execute(EFFECTS_TABLE)
        cluster = bench_cluster(db.url, "overload")
        try:
            cluster.worker("w1", concurrency=slots, pool="threads")
            cluster.dispatcher("d1")
            wait_for(
                lambda: conn.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
                timeout=60,
                message="worker ready",
            )
            began = time.monotonic()
            load(conn, cluster)
            try:
                wait_for(
                    lambda: _outcome(conn, n)["succeeded"] == n,
                    timeout=capacity_s * 4 + 60,
                    interval=0.5,
                    message=f"{n} jobs succeeded",
                )
                ended = "all succeeded"
            except AssertionError:
                ended = "TIMED OUT"
            seconds = time.monotonic() - began
        finally:
            cluster.stop()
        outcome = _outcome(conn, n)
    return {
        "scenario": name,
        "jobs": n,
        "ended": ended,
        "seconds": seconds,
        "ideal_s": capacity_s,
        "time / ideal": seconds / capacity_s,
        "claims beyond one": outcome["claims_beyond_one"],
        "re-claimed share": outcome["claims_beyond_one"] / n,
        "run twice": outcome["doubled"],
    }


def main() -> None:
    args = parse()
    rows = [slow_handlers(args), frozen_worker(args)]
    columns = list(rows[0])
    print(table(rows, columns))
    write_json("overload", {"machine": machine(), "args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
