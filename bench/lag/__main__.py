"""Start lag (started_at − run_at) and dispatcher idle load.

    python -m bench.lag [--jobs 5000] [--seconds 60] [--dispatchers 2] [--workers 1]

Real processes: N dispatchers and Celery workers (threads pool) against a fresh database
on the local PostgreSQL and the local Redis. Jobs are no-op at-least-once jobs spread
evenly over the window; then the cluster idles for --idle seconds and the statements of
each dispatcher are counted from its own counters and from pg_stat_statements-free
database counters (xact_commit of the dispatcher sessions is not separable, so the
dispatcher's own statement counter is reported).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from tqdm import tqdm

from bench.common import BROKER_URL, BenchDatabase, summary, table, write_json
from tests.processes.support import Cluster, insert_jobs, outcome

NOOP = "tests.handlers.recording.noop"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--dispatchers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--idle", type=float, default=60)
    parser.add_argument("--delivery", default="at_least_once")
    return parser.parse_args()


def lags(conn, column_from: str, column_to: str) -> list[float]:
    rows = conn.execute(
        f"SELECT extract(epoch FROM {column_to} - {column_from}) * 1000 FROM tasksapp_job"
        f" WHERE {column_to} IS NOT NULL"
    ).fetchall()
    return [float(r[0]) for r in rows]


def idle_load(conn, seconds: float) -> list[dict]:
    """Statements per minute per dispatcher while no work is due."""

    def snapshot():
        return dict(
            conn.execute(
                "SELECT dispatcher, sum(statements) FROM tasksapp_dispatchercounter GROUP BY 1"
            ).fetchall()
        )

    time.sleep(12)  # let counters from the run flush (heartbeat every 10 s)
    before = snapshot()
    for _ in tqdm(range(int(seconds)), desc="idle", unit="s", leave=False):
        time.sleep(1)
    time.sleep(11)
    after = snapshot()
    minutes = (seconds + 11) / 60
    return [
        {
            "dispatcher": name,
            "jobs_table_statements_per_min": (after.get(name, 0) - before.get(name, 0)) / minutes,
        }
        for name in sorted(after)
    ]


def main() -> None:
    args = parse()
    with BenchDatabase("tempo_bench_lag") as db, db.connect() as conn:
        cluster = Cluster(
            database_url=db.url,
            broker_url=BROKER_URL,
            queue=f"bench-{uuid.uuid4().hex[:6]}",
            logs=db_logs(),
        )
        try:
            for i in range(args.dispatchers):
                cluster.dispatcher(f"d{i + 1}")
            for i in range(args.workers):
                cluster.worker(f"w{i + 1}", concurrency=args.concurrency)
            time.sleep(6)
            insert_jobs(
                conn,
                count=args.jobs,
                start=5,
                spread=args.seconds,
                handler=NOOP,
                delivery=args.delivery,
            )
            with tqdm(total=args.jobs, desc="jobs", unit="job") as bar:
                deadline = time.monotonic() + args.seconds + 60
                while time.monotonic() < deadline:
                    done = outcome(conn).get("succeeded", 0)
                    bar.update(done - bar.n)
                    if done >= args.jobs:
                        break
                    time.sleep(0.5)
            results = {
                "start_lag_ms": summary(lags(conn, "run_at", "started_at")),
                "claim_lag_ms": summary(lags(conn, "run_at", "claimed_at")),
                "claim_to_start_ms": summary(lags(conn, "claimed_at", "started_at")),
            }
            load = idle_load(conn, args.idle)
        finally:
            cluster.stop()
    rows = [{"measure": k, **v} for k, v in results.items()]
    print(table(rows, ["measure", "n", "p50", "p95", "p99", "max", "avg"]))
    print(table(load, ["dispatcher", "jobs_table_statements_per_min"]))
    path = write_json("lag", {"args": vars(args), **results, "idle": load})
    print(f"wrote {path}", file=sys.stderr)


def db_logs():
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp(prefix="bench-lag-"))


if __name__ == "__main__":
    main()
