"""Capacity: what one job costs PostgreSQL, and how fast one dispatcher and one worker
process go, per delivery mode, in one run.

    python -m bench.capacity [--jobs 10000]
        [--runs at_least_once:prefork at_least_once:threads transactional:prefork ...]
        [--steady at_least_once transactional] [--steady-rate 200] [--steady-seconds 30]

Each run uses a fresh database on a PostgreSQL server of the bench's own (started with
pg_stat_statements, which the shared server does not load; `fsync=off` as in the process
tests) and the shared Redis. N no-op jobs are inserted due at one instant (one
set-based statement, as the planner does), then, in three measured phases:

1. *insert*: the one `INSERT … SELECT`;
2. *claim*: one dispatcher, no worker, backpressure off and a 600 s claim lease, claims
   and publishes all N: its rate is jobs claimed per second from the first possible
   claim (run_at − dispatch lead) to the last;
3. *run*: one worker process (`prefork -c 1`: one child; `threads -c 4`) starts, runs
   and finishes all N from the full queue: jobs per second from its first start to its
   last finish.

For each phase: the CPU time of every PostgreSQL server process (from /proc, the
postmaster's reaped children included), WAL bytes, and the statements run (from
pg_stat_statements, the bench's own queries left out). Per run: the jobs table's row
counters, its size, and the dispatcher's and worker's own CPU.

Then, per `--steady` delivery, jobs due evenly at `--steady-rate` per second (as
golden-ratio phases spread a daily task) with one dispatcher and two worker processes
running together: the same figures for jobs that come a few at a time, and their lag.
bench/capacity/simulate.py reads the results file to fit its costs (docs/SCALING.md).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from bench.burst.__main__ import worker_args
from bench.capacity import measure
from bench.common import BROKER_URL, table, write_json
from tests.processes.support import Cluster, migrate, wait_for

NOOP = "tests.handlers.recording.noop"
LEAD_MS = 40
INSERT = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT %(handler)s, '{}', to_timestamp(%(at)s + (i - 1) * %(step)s), 'scheduled', 0, 5,
    '{"delays": [1]}', %(delivery)s, md5(random()::text || i), 0, '', '', '[]'
FROM generate_series(1, %(n)s) AS i
"""
CONCURRENCY = {"prefork": 1, "threads": 4}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument(
        "--runs",
        nargs="+",
        default=[
            "at_least_once:prefork",
            "at_least_once:threads",
            "at_most_once:prefork",
            "transactional:prefork",
        ],
        help="delivery:pool of each burst run",
    )
    parser.add_argument("--steady-rate", type=int, default=200, help="jobs/s, spread evenly")
    parser.add_argument("--steady-seconds", type=int, default=30)
    parser.add_argument(
        "--steady", nargs="*", default=["at_least_once", "transactional"], help="deliveries"
    )
    return parser.parse_args()


def count(conn: psycopg.Connection, where: str) -> int:
    query = f"{measure.BENCH_TAG} SELECT count(*) FROM tasksapp_job WHERE {where}"
    return conn.execute(query).fetchone()[0]


def seconds_between(conn: psycopg.Connection, expression: str) -> float:
    query = f"{measure.BENCH_TAG} SELECT extract(epoch FROM {expression}) FROM tasksapp_job"
    return float(conn.execute(query + " LIMIT 1").fetchone()[0])


class Phase:
    """The server's CPU, WAL and statements over one stretch of a run."""

    def __init__(self, conn: psycopg.Connection, postmaster: int, jobs: int) -> None:
        self.conn, self.postmaster, self.jobs = conn, postmaster, jobs

    def __enter__(self) -> Phase:
        measure.reset_statements(self.conn)
        self.before = measure.snapshot(self.conn, self.postmaster)
        return self

    def __exit__(self, *exc) -> None:
        after = measure.snapshot(self.conn, self.postmaster)
        self.cpu_s = after.server_cpu_s - self.before.server_cpu_s
        self.wal = measure.wal_bytes(self.conn, self.before, after)
        self.statements = measure.statements(self.conn)

    def figures(self) -> dict:
        on_jobs = [s for s in self.statements if s.on_jobs_table]
        return {
            "pg_cpu_ms_per_job": round(self.cpu_s * 1000 / self.jobs, 4),
            "wal_bytes_per_job": round(self.wal / self.jobs, 1),
            "statements_per_job": round(sum(s.calls for s in self.statements) / self.jobs, 4),
            "job_table_statements_per_job": round(sum(s.calls for s in on_jobs) / self.jobs, 4),
            "exec_ms_per_job": round(sum(s.total_ms for s in self.statements) / self.jobs, 4),
            "top": [
                {
                    "statement": s.kind,
                    "calls": s.calls,
                    "mean_ms": round(s.total_ms / s.calls, 3),
                    "rows_per_call": round(s.rows / s.calls, 1),
                    "wal_bytes": s.wal_bytes,
                }
                for s in self.statements[:6]
            ],
        }


@contextlib.contextmanager
def fresh_database(server: measure.StatementsPostgres):
    """A migrated database of its own on the bench's server; dropped after."""
    base = server.url.rsplit("/", 1)[0]
    name = f"capacity_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    migrate(f"{base}/{name}")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def engine_cluster(url: str, **settings: str) -> Cluster:
    return Cluster(
        database_url=url,
        broker_url=BROKER_URL,
        queue=f"capacity-{uuid.uuid4().hex[:6]}",
        logs=Path(tempfile.mkdtemp(prefix="bench-capacity-")),
        TEMPO_TUNING_COORDINATION_SECONDS="2",
        TEMPO_RUN_LEASE_SECONDS="6",
        TEMPO_DISPATCH_LEAD_MS=str(LEAD_MS),
        **settings,
    )


def burst_run(url: str, postmaster: int, n: int, delivery: str, pool: str) -> dict:
    # Backpressure off and long claim leases: the dispatcher claims all while no worker runs.
    cluster = engine_cluster(
        url, TEMPO_CLAIM_TTL_SECONDS="600", TEMPO_TUNING_MAX_QUEUED_MESSAGES="1000000"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        at = time.time() + 20 + n / 10_000
        with Phase(conn, postmaster, n) as insert:
            conn.execute(
                INSERT, {"handler": NOOP, "at": at, "step": 0, "n": n, "delivery": delivery}
            )
        try:
            dispatcher = cluster.dispatcher("d1")
            time.sleep(max(0.0, at - time.time() - 2))
            with Phase(conn, postmaster, n) as claim:
                cpu_before = measure.tree_cpu_seconds(dispatcher.pid)
                wait_for(
                    lambda: count(conn, "state = 'scheduled'") == 0,
                    timeout=600,
                    interval=0.5,
                    message="all claimed",
                )
                time.sleep(1.0)  # the last batch's publish
                dispatcher_cpu = measure.tree_cpu_seconds(dispatcher.pid) - cpu_before
            claim_s = seconds_between(
                conn,
                f"(SELECT max(claimed_at) FROM tasksapp_job) - to_timestamp({at})"
                f" + interval '{LEAD_MS} ms'",
            )
            worker = cluster._start("w1", worker_args(cluster, "w1", CONCURRENCY[pool], pool))
            with Phase(conn, postmaster, n) as run:
                wait_for(
                    lambda: count(conn, "started_at IS NOT NULL") > 0,
                    timeout=120,
                    interval=0.05,
                    message="the first start",
                )
                worker_before = measure.tree_cpu_seconds(worker.pid)  # its start-up left out
                wait_for(
                    lambda: count(conn, "state = 'succeeded'") >= n,
                    timeout=900,
                    interval=0.5,
                    message="all finished",
                )
                worker_cpu = measure.tree_cpu_seconds(worker.pid) - worker_before
            run_s = seconds_between(
                conn,
                "(SELECT max(finished_at) - min(started_at) FROM tasksapp_job)",
            )
        finally:
            cluster.stop()
        time.sleep(1.5)  # exited backends have flushed their statistics
        tuples = measure.job_table_tuples(conn)
        size = measure.table_bytes(conn)
        not_once = count(conn, "attempts <> 1 OR state <> 'succeeded'")
    return {
        "delivery": delivery,
        "pool": f"{pool} -c {CONCURRENCY[pool]}",
        "jobs": n,
        "not_exactly_once": not_once,
        "claim_jobs_per_s": round(n / claim_s),
        "run_jobs_per_s": round(n / run_s),
        "dispatcher_cpu_ms_per_job": round(dispatcher_cpu * 1000 / n, 4),
        "worker_cpu_ms_per_job": round(worker_cpu * 1000 / n, 4),
        "insert": insert.figures(),
        "claim": claim.figures(),
        "run": run.figures(),
        "job_table_rows_per_job": {k: round(v / n, 3) for k, v in tuples.items()},
        "table_bytes_per_job": {k: round(v / n, 1) for k, v in size.items()},
    }


def steady_run(url: str, postmaster: int, rate: int, seconds: int, delivery: str) -> dict:
    """Jobs spread evenly (as golden-ratio phases spread a daily task), one dispatcher and
    two worker processes (threads -c 4) running together: what a job due alone costs."""
    n = rate * seconds
    cluster = engine_cluster(url, TEMPO_CLAIM_TTL_SECONDS="10")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        at = time.time() + 25
        step = 1 / rate
        conn.execute(
            INSERT, {"handler": NOOP, "at": at, "step": step, "n": n, "delivery": delivery}
        )
        try:
            dispatcher = cluster.dispatcher("d1")
            workers = [
                cluster._start(name, worker_args(cluster, name, 4, "threads"))
                for name in ("w1", "w2")
            ]
            time.sleep(max(0.0, at - time.time()))
            with Phase(conn, postmaster, n) as steady:
                before = [measure.tree_cpu_seconds(p.pid) for p in (dispatcher, *workers)]
                wait_for(
                    lambda: count(conn, "state = 'succeeded'") >= n,
                    timeout=seconds + 300,
                    interval=0.5,
                    message="all finished",
                )
                after = [measure.tree_cpu_seconds(p.pid) for p in (dispatcher, *workers)]
        finally:
            cluster.stop()
        lag_p50, lag_p99 = conn.execute(
            f"{measure.BENCH_TAG} SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP"
            " (ORDER BY extract(epoch FROM started_at - run_at) * 1000) FROM tasksapp_job"
        ).fetchone()[0]
        not_once = count(conn, "attempts <> 1 OR state <> 'succeeded'")
    return {
        "delivery": delivery,
        "pool": "threads -c 4, 2 workers",
        "jobs": n,
        "rate": rate,
        "not_exactly_once": not_once,
        "lag_p50_ms": round(lag_p50, 2),
        "lag_p99_ms": round(lag_p99, 2),
        "dispatcher_cpu_ms_per_job": round((after[0] - before[0]) * 1000 / n, 4),
        "worker_cpu_ms_per_job": round((sum(after[1:]) - sum(before[1:])) * 1000 / n, 4),
        "steady": steady.figures(),
    }


def steady_rows(results: list[dict]) -> list[dict]:
    return [
        {
            "delivery": r["delivery"],
            "jobs/s (spread evenly)": r["rate"],
            "jobs": r["jobs"],
            "once": "yes" if r["not_exactly_once"] == 0 else f"NO ({r['not_exactly_once']})",
            "lag p50 / p99 ms": f"{r['lag_p50_ms']} / {r['lag_p99_ms']}",
            "PG CPU ms/job": r["steady"]["pg_cpu_ms_per_job"],
            "jobs/s per PG core": round(1000 / r["steady"]["pg_cpu_ms_per_job"]),
            "stmts/job (jobs table)": r["steady"]["job_table_statements_per_job"],
            "stmts/job (all)": r["steady"]["statements_per_job"],
            "exec ms/job": r["steady"]["exec_ms_per_job"],
            "WAL B/job": r["steady"]["wal_bytes_per_job"],
            "dispatcher / workers CPU ms/job": (
                f"{r['dispatcher_cpu_ms_per_job']:.3f} / {r['worker_cpu_ms_per_job']:.3f}"
            ),
        }
        for r in results
    ]


def summary_rows(results: list[dict]) -> list[dict]:
    rows = []
    for r in results:
        phases = [r["insert"], r["claim"], r["run"]]
        cpu = sum(p["pg_cpu_ms_per_job"] for p in phases)
        rows.append(
            {
                "delivery": r["delivery"],
                "pool": r["pool"],
                "jobs": r["jobs"],
                "once": "yes" if r["not_exactly_once"] == 0 else f"NO ({r['not_exactly_once']})",
                "claim jobs/s (1 dispatcher)": r["claim_jobs_per_s"],
                "run jobs/s (1 worker process)": r["run_jobs_per_s"],
                "PG CPU ms/job ins+claim+run": (
                    f"{r['insert']['pg_cpu_ms_per_job']:.3f}+{r['claim']['pg_cpu_ms_per_job']:.3f}"
                    f"+{r['run']['pg_cpu_ms_per_job']:.3f}"
                ),
                "jobs/s per PG core": round(1000 / cpu) if cpu else "",
                "stmts/job (jobs table)": round(
                    sum(p["job_table_statements_per_job"] for p in phases), 3
                ),
                "WAL B/job ins+claim+run": (
                    f"{r['insert']['wal_bytes_per_job']:.0f}+{r['claim']['wal_bytes_per_job']:.0f}"
                    f"+{r['run']['wal_bytes_per_job']:.0f}"
                ),
                "table+index B/job": round(sum(r["table_bytes_per_job"].values())),
                "dispatcher / worker CPU ms/job": (
                    f"{r['dispatcher_cpu_ms_per_job']:.3f} / {r['worker_cpu_ms_per_job']:.3f}"
                ),
            }
        )
    return rows


def main() -> None:
    args = parse()
    server = measure.StatementsPostgres().start()
    bursts, steadies = [], []
    try:
        for spec in args.runs:
            delivery, pool = spec.split(":")
            with fresh_database(server) as url:
                bursts.append(burst_run(url, server.postmaster_pid(), args.jobs, delivery, pool))
            print(table(summary_rows(bursts[-1:]), list(summary_rows(bursts[-1:])[0])))
        for delivery in args.steady:
            with fresh_database(server) as url:
                steadies.append(
                    steady_run(
                        url,
                        server.postmaster_pid(),
                        args.steady_rate,
                        args.steady_seconds,
                        delivery,
                    )  # fmt: skip
                )
            print(table(steady_rows(steadies[-1:]), list(steady_rows(steadies[-1:])[0])))
    finally:
        server.stop()
    if bursts:
        rows = summary_rows(bursts)
        print("\nBursts: N jobs due at one instant\n")
        print(table(rows, list(rows[0])))
    if steadies:
        rows = steady_rows(steadies)
        print("\nSpread evenly\n")
        print(table(rows, list(rows[0])))
    for r in bursts + steadies:
        for phase in ("claim", "run", "steady"):
            if phase in r:
                print(f"\n{r['delivery']} {r['pool']} {phase}: top statements\n")
                print(table(r[phase]["top"], ["statement", "calls", "mean_ms", "rows_per_call"]))
    path = write_json("capacity", {"args": vars(args), "bursts": bursts, "steady": steadies})
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
