"""Dispatch modes side by side: database polling vs the Redis due index, in one run.

    python -m bench.redis_mode [--duration 120] [--sizes 10000 100000]

For each mode (`TEMPO_DISPATCH_MODE=database`, then `redis`): the scheduling-practice
workload (bench/practice, with its HA kills; 120 s instead of 600 s by default so both
modes fit in one run), then bursts of N no-op jobs due at one instant (bench/burst).
Each run gets a fresh database; the index lives in a Redis server of the bench's own, so
its INFO commandstats count the index's commands only (the broker's traffic is the same
in both modes). Reported per run: jobs-table scans (pg_stat_user_tables), dispatcher
jobs-table statements per job, index Redis commands per job, the exercise's efficient
score (avg + stdev of the delay) and jobs/s.
"""

from __future__ import annotations

import argparse
import os
import time

from bench.burst.__main__ import INSERT, NOOP, worker_args
from bench.common import BenchDatabase, bench_cluster, summary, table, write_json
from bench.practice.__main__ import Practice, score_ours
from tests.processes.support import PrivateRedis

MODES = ("database", "redis")
COLUMNS = [
    "mode",
    "workload",
    "jobs",
    "pass",
    "executed_twice",
    "seq_scans",
    "index_scans",
    "statements_per_job",
    "rows_read_per_job",
    "redis_cmds_per_job",
    "efficient",
    "lag_p50_ms",
    "lag_p99_ms",
    "jobs_per_s",
]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120)
    parser.add_argument("--instances", type=int, default=5)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--threads", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--burst-dispatchers", type=int, default=2)
    parser.add_argument("--burst-workers", type=int, default=2)
    parser.add_argument("--burst-concurrency", type=int, default=2)
    parser.add_argument("--no-practice", action="store_true")
    parser.add_argument("--seed", type=int, default=20190831)
    return parser.parse_args()


class IndexRedis:
    """The index's own Redis server, and its command count since the last reset."""

    def __init__(self) -> None:
        import redis

        self.server = PrivateRedis().start()
        self.client = redis.Redis(port=self.server.port)

    def reset(self) -> None:
        self.client.flushall()
        self.client.config_resetstat()

    def commands(self) -> int:
        stats = self.client.info("commandstats")
        return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info",))

    def stop(self) -> None:
        self.server.stop()


def use_mode(mode: str, index: IndexRedis) -> None:
    """Every process the benches start inherits this environment (Cluster copies it)."""
    os.environ["TEMPO_DISPATCH_MODE"] = mode
    os.environ["TEMPO_INDEX_REDIS_URL"] = index.server.url
    index.reset()


def table_scans(conn) -> tuple[int, int]:
    """Sequential and index scans of the jobs table. An index scan is counted for each
    probe: a claim joined to its ids by a nested loop counts one per id."""
    time.sleep(0.6)  # backends report their table statistics within 0.5 s
    row = conn.execute(
        "SELECT seq_scan, idx_scan FROM pg_stat_user_tables WHERE relname = 'tasksapp_job'"
    ).fetchone()
    return int(row[0]), int(row[1])


def dispatcher_counts(conn) -> tuple[int, int]:
    """Jobs-table statements and rows read by the dispatchers (their own counters)."""
    row = conn.execute(
        "SELECT COALESCE(sum(statements), 0), COALESCE(sum(rows_fetched), 0)"
        " FROM tasksapp_dispatchercounter"
    ).fetchone()
    return int(row[0]), int(row[1])


def wait_done(conn, n: int, timeout: float) -> int:
    """Wait until n jobs succeeded; returns how many scans of the jobs table it made."""
    # Exactly one sequential scan per query, so the bench's own reads can be subtracted.
    for setting in ("max_parallel_workers_per_gather", "enable_indexscan", "enable_bitmapscan"):
        conn.execute(f"SET {setting} = 0")
    conn.execute("SET enable_indexonlyscan = 0")
    deadline, queries = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        queries += 1
        done = conn.execute(
            "SELECT count(*) FROM tasksapp_job WHERE state = 'succeeded'"
        ).fetchone()[0]
        if done >= n:
            return queries
        time.sleep(0.5)
    raise SystemExit(f"only {done} of {n} jobs finished within {timeout} s")


def practice_run(args, mode: str, index: IndexRedis) -> dict:
    use_mode(mode, index)
    options = argparse.Namespace(
        duration=args.duration,
        instances=args.instances,
        workers=args.workers,
        threads=args.threads,
        one_per_message=False,
        batches=True,
        shared_workers=True,  # the topology this comparison was measured in
        polling_only=False,
        env=[],
        latency_ms=0.0,
        no_kills=False,
        no_baseline=True,
        seed=args.seed,
        start_delay=30,
    )
    with BenchDatabase("tempo_modes_practice") as db:
        practice = Practice(options, db, None)
        try:
            practice.prepare()  # resets pg_stat after the upfront insert
            index.reset()
            practice.plan()
            practice.run()
        finally:
            practice.stop()
        scans = table_scans(practice.ours_sql)
        statements, rows_read = dispatcher_counts(practice.ours_sql)
        result, delays, _ = score_ours(practice.ours_sql)
        practice.ours_sql.close()
    jobs = result["jobs"]
    lag = summary(delays)
    return {
        "mode": mode,
        "workload": f"practice {int(args.duration)} s",
        "jobs": jobs,
        "pass": result["pass"],
        "executed_twice": result["executed_twice"],
        "seq_scans": scans[0],
        "index_scans": scans[1],
        "statements_per_job": round(statements / max(jobs, 1), 4),
        "rows_read_per_job": round(rows_read / max(jobs, 1), 2),
        "redis_cmds_per_job": round(index.commands() / max(jobs, 1), 2),
        "efficient": result["efficient"],
        "lag_p50_ms": round(lag["p50"]),
        "lag_p99_ms": round(lag["p99"]),
        "jobs_per_s": round(jobs / args.duration, 1),
        "list_queries": result["list_queries"],
        "failed_claims": result["failed_claims"],
        "cost": result["cost"],
    }


def burst_run(args, mode: str, index: IndexRedis, n: int) -> dict:
    use_mode(mode, index)
    with BenchDatabase("tempo_modes_burst") as db, db.connect() as conn:
        cluster = bench_cluster(db.url, "modes")
        at = time.time() + 30 + n / 20_000
        conn.execute(INSERT, {"handler": NOOP, "at": at, "n": n, "delivery": "at_least_once"})
        conn.execute("SELECT pg_stat_reset()")
        index.reset()
        try:
            for i in range(args.burst_workers):
                name = f"w{i + 1}"
                cluster._start(name, worker_args(cluster, name, args.burst_concurrency))
            for i in range(args.burst_dispatchers):
                cluster.dispatcher(f"d{i + 1}")
            time.sleep(max(0.0, at - time.time()))
            own_scans = wait_done(conn, n, timeout=600)
        finally:
            cluster.stop()
        seq, idx = table_scans(conn)
        return burst_row(conn, mode, n, index, (seq - own_scans, idx))


def burst_row(conn, mode: str, n: int, index: IndexRedis, scans: tuple[int, int]) -> dict:
    lags = [
        float(r[0])
        for r in conn.execute(
            "SELECT extract(epoch FROM started_at - run_at) * 1000 FROM tasksapp_job"
        ).fetchall()
    ]
    statements, rows_read = dispatcher_counts(conn)
    twice = conn.execute("SELECT count(*) FROM tasksapp_job WHERE attempts <> 1").fetchone()[0]
    lag = summary(lags)
    return {
        "mode": mode,
        "workload": f"burst {n}",
        "jobs": n,
        "pass": twice == 0,
        "executed_twice": twice,
        "seq_scans": scans[0],
        "index_scans": scans[1],
        "statements_per_job": round(statements / n, 4),
        "rows_read_per_job": round(rows_read / n, 2),
        "redis_cmds_per_job": round(index.commands() / n, 2),
        "efficient": None,
        "lag_p50_ms": round(lag["p50"]),
        "lag_p99_ms": round(lag["p99"]),
        "jobs_per_s": round(n / (max(lags) / 1000)),
    }


def main() -> None:
    args = parse()
    index = IndexRedis()
    rows: list[dict] = []
    try:
        for mode in MODES:
            if not args.no_practice:
                rows.append(practice_run(args, mode, index))
                print(table(rows[-1:], COLUMNS), flush=True)
            for n in args.sizes:
                rows.append(burst_run(args, mode, index, n))
                print(table(rows[-1:], COLUMNS), flush=True)
    finally:
        index.stop()
        os.environ.pop("TEMPO_DISPATCH_MODE", None)
    print(table(rows, COLUMNS))
    path = write_json("redis_mode", {"args": vars(args), "results": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
