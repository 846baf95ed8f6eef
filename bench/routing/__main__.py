"""Routing under load: a limited flood beside a stream of critical jobs, and a rate limit.

    python -m bench.routing [--flood 50000] [--limit 20] [--rate 200] [--rate-seconds 60]
                            [--pool prefork|threads] [--concurrency N]

Two dispatchers and two Celery workers, each worker as docker-compose.yml runs it by
default (`-P prefork -c 8`) unless `--pool threads` (`-c 16`, as in earlier runs).

0. Quiet: the critical stream below alone, for `--quiet-seconds`: its start lag without
   a flood, measured in the same run as the flood's, side by side. It follows
   `--warm-seconds` of the same stream, not counted: each worker thread's first job
   (its connection, its first statements) takes some 0.5-1 s on a loaded machine.
1. Flood: `--flood` low-priority (0) jobs of the queue "bulk", limited to `--limit` at
   once, all due at one instant, while critical jobs (priority 9, queue "critical") are
   scheduled 20 a second, each 0.5 s ahead, on the same workers, until the flood has
   drained. Reported: the critical jobs' start lag (started_at − run_at), the flood's
   drain rate, and the most bulk handlers that ran at once, from the handlers' own
   begin/end records (Redis), never from Tempo's rows.
2. Rate: `--rate` starts a second on the queue "api", with a minute and a bit of jobs
   due at once; reported: starts in the first `--rate-seconds` s after the first, from
   the handlers' records, against the limit, and the CPU each part of the service
   (dispatchers, workers, their pool processes, PostgreSQL, Redis) spent per job.

`--phases` runs some of them (the rate alone: `--phases rate`).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
import redis

from bench.common import BROKER_URL, BenchDatabase, bench_cluster, summary, write_json
from bench.cpu import cpu_by_part, cpu_spent
from tasksapp.engine.ratelimit import gcra_burst

SPAN = "bench.routing.handlers.span"
INSERT = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors,
    queue, priority, concurrency_key)
SELECT %(handler)s, %(payload)s, %(run_at)s, 'scheduled', 0, 5, '{"delays": [1]}',
    'at_least_once', md5(random()::text || i), 0, '', '', '[]', %(queue)s, %(priority)s, ''
FROM generate_series(1, %(n)s) AS i
"""
TARGET_P99_MS = 25.0  # what a critical job's start lag must stay under at p99
CLAIM_IN_TIME_MS = 10.0
QUEUE = """
INSERT INTO tasksapp_jobqueue (name, paused, concurrency_limit, key_concurrency_limit,
    rate_limit, rate_period, updated_at)
VALUES (%(name)s, false, %(limit)s, NULL, %(rate)s, 1.0, now())
"""


DEFAULT_CONCURRENCY = {"prefork": 8, "threads": 16}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=50_000)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--critical-per-s", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=0.005, help="each bulk handler sleeps")
    parser.add_argument("--quiet-seconds", type=float, default=20.0)
    parser.add_argument("--warm-seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--rate-seconds", type=float, default=60.0)
    parser.add_argument(
        "--phases", default="quiet,flood,rate", help="which phases to run, comma separated"
    )
    parser.add_argument("--out", default="routing", help="results file: bench/results/<out>.json")
    parser.add_argument("--dispatchers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--pool",
        choices=("prefork", "threads"),
        default="prefork",
        help="the workers' pool (prefork: as docker-compose.yml runs them)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="processes (prefork, default 8, as docker-compose.yml) or threads (default 16)"
        " per worker",
    )
    parser.add_argument(
        "--lead-ms", type=int, default=None, help="TEMPO_DISPATCH_LEAD_MS (default: 40)"
    )
    args = parser.parse_args()
    if args.concurrency is None:
        args.concurrency = DEFAULT_CONCURRENCY[args.pool]
    return args


def insert(conn, *, n: int, queue: str, priority: int, run_at, payload: dict) -> None:
    conn.execute(
        INSERT,
        {
            "handler": SPAN,
            "payload": json.dumps(payload),
            "run_at": run_at,
            "queue": queue,
            "priority": priority,
            "n": n,
        },
    )


def spans(client: redis.Redis, key: str) -> list[tuple[int, float, float]]:
    rows = [raw.decode().split() for raw in client.lrange(key, 0, -1)]
    return [(int(job), float(began), float(ended)) for job, began, ended in rows]


def most_at_once(records: list[tuple[int, float, float]]) -> int:
    """The most handlers between their begin and end at one moment (an end first)."""
    events = sorted([(b, 1) for _, b, _ in records] + [(e, -1) for _, _, e in records])
    running = most = 0
    for _, delta in events:
        running += delta
        most = max(most, running)
    return most


def left(conn, queue: str) -> int:
    return conn.execute(
        "SELECT count(*) FROM tasksapp_job WHERE queue = %s AND state <> 'succeeded'", [queue]
    ).fetchone()[0]


def all_ran(conn, client: redis.Redis, records: str, queue: str, n: int) -> bool:
    """Every job of the queue ran: first by its handlers' records (Redis, cheap), then by
    its rows, once the records say so. A count of the rows every second cost the server
    some 6 % of a core during a flood: the bench must not load what it measures."""
    return client.llen(records) >= n and not left(conn, queue)


def critical_stream(db_url: str, stop: threading.Event, per_s: float, record: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        while not stop.wait(1 / per_s):
            conn.execute(
                INSERT.replace("%(run_at)s", "clock_timestamp() + interval '0.5 s'"),
                {
                    "handler": SPAN,
                    "payload": json.dumps({"record": record}),
                    "queue": "critical",
                    "priority": 9,
                    "n": 1,
                },
            )


def critical_lags(conn, *, until: float) -> list[tuple[float, float]]:
    """(start lag, claim lag) in ms of the critical jobs due before `until` (epoch s) not
    yet read: started_at − run_at, and claimed_at − run_at (negative: claimed ahead, as
    the dispatcher's lead intends)."""
    return [
        (float(r[0]), float(r[1]))
        for r in conn.execute(
            "UPDATE tasksapp_job SET queue = 'critical-read' WHERE queue = 'critical'"
            " AND started_at IS NOT NULL AND run_at <= to_timestamp(%s)"
            " RETURNING extract(epoch FROM started_at - run_at) * 1000,"
            " extract(epoch FROM claimed_at - run_at) * 1000",
            [until],
        ).fetchall()
    ]


def lag_summary(prefix: str, lags: list[tuple[float, float]]) -> dict:
    lag = summary([start for start, _ in lags])
    claim = summary([claimed for _, claimed in lags])
    late = [(start, claimed) for start, claimed in lags if start > TARGET_P99_MS]
    return {
        f"{prefix}_jobs": len(lags),
        f"{prefix}_lag_p50_ms": round(lag["p50"], 1),
        f"{prefix}_lag_p95_ms": round(lag["p95"], 1),
        f"{prefix}_lag_p99_ms": round(lag["p99"], 1),
        f"{prefix}_lag_max_ms": round(lag["max"], 1),
        f"{prefix}_claim_lag_p50_ms": round(claim["p50"], 1),
        f"{prefix}_claim_lag_p99_ms": round(claim["p99"], 1),
        f"{prefix}_claim_lag_max_ms": round(claim["max"], 1),
        # Where the late starts come from: those over the target whose claim was late too
        # (less than the broker hop and a start, 10 ms, before run_at) lost time on the
        # dispatcher's side.
        f"{prefix}_over_target": len(late),
        f"{prefix}_over_target_claimed_late": sum(
            claimed > -CLAIM_IN_TIME_MS for _, claimed in late
        ),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def quiet_phase(args, db, conn, key: str) -> dict:
    for seconds in (args.warm_seconds, args.quiet_seconds):  # the warm-up's lags dropped
        stop = threading.Event()
        stream = threading.Thread(
            target=critical_stream, args=(db.url, stop, args.critical_per_s, f"{key}:critical")
        )
        stream.start()
        time.sleep(seconds)
        stop.set()
        stream.join()
        time.sleep(2)
        lags = critical_lags(conn, until=time.time())
    return lag_summary("quiet_critical", lags)


def flood_phase(args, db, conn, client, key: str) -> dict:
    conn.execute(QUEUE, {"name": "bulk", "limit": args.limit, "rate": None})
    at = conn.execute("SELECT clock_timestamp() + interval '20 s'").fetchone()[0]
    payload = {"record": f"{key}:bulk", "seconds": args.seconds}
    insert(conn, n=args.flood, queue="bulk", priority=0, run_at=at, payload=payload)
    time.sleep(max(0.0, (at.timestamp() - time.time()) - 1))
    stop = threading.Event()
    stream = threading.Thread(
        target=critical_stream, args=(db.url, stop, args.critical_per_s, f"{key}:critical")
    )
    stream.start()
    began = time.time()
    try:
        while not all_ran(conn, client, payload["record"], "bulk", args.flood):
            if time.time() - began > 900:
                raise SystemExit("the flood did not drain within 900 s")
            time.sleep(1)
    finally:
        stop.set()
        stream.join()
    drained = time.time() - began
    time.sleep(3)  # the last critical jobs
    lags = critical_lags(conn, until=began + drained)  # due while the flood drained
    bulk = spans(client, f"{key}:bulk")
    return {
        "flood": args.flood,
        "limit": args.limit,
        "drain_s": round(drained, 1),
        "flood_jobs_per_s": round(args.flood / drained),
        "bulk_records": len(bulk),
        "bulk_most_at_once": most_at_once(bulk),
        **lag_summary("flood_critical", lags),
    }


def rate_phase(args, conn, client, key: str, cluster) -> dict:
    conn.execute(QUEUE, {"name": "api", "limit": None, "rate": args.rate})
    conn.execute("SELECT pg_notify('tempo_jobs', 'routing')")
    n = int(args.rate * (args.rate_seconds + 10))
    at = conn.execute("SELECT clock_timestamp() + interval '5 s'").fetchone()[0]
    insert(conn, n=n, queue="api", priority=5, run_at=at, payload={"record": f"{key}:api"})
    cpu_before = cpu_by_part(cluster)
    deadline = time.time() + args.rate_seconds * 2 + 60
    while not all_ran(conn, client, f"{key}:api", "api", n) and time.time() < deadline:
        time.sleep(1)
    cpu = cpu_spent(cpu_before, cpu_by_part(cluster))
    starts = sorted(began for _, began, _ in spans(client, f"{key}:api"))
    first = starts[0]
    in_window = sum(1 for t in starts if t < first + args.rate_seconds)
    per_s = [sum(1 for t in starts if first + s <= t < first + s + 1) for s in range(60)]
    # Any one second, not only those counted from the first start: what the limit bounds.
    busiest = max(bisect.bisect_left(starts, t + 1.0) - i for i, t in enumerate(starts))
    # The limiter's own figure: claims (the database's claimed_at), apart from how fast
    # the workers start what was claimed.
    claimed = [
        row[0]
        for row in conn.execute(
            "SELECT extract(epoch FROM claimed_at)::float8 FROM tasksapp_job"
            " WHERE queue = 'api' AND claimed_at IS NOT NULL ORDER BY claimed_at"
        ).fetchall()
    ]
    claims_in_window = sum(1 for t in claimed if t < claimed[0] + args.rate_seconds)
    return {
        "claims_in_window": claims_in_window,
        "claimed_per_s": round(claims_in_window / args.rate_seconds, 1),
        "rate_limit_per_s": args.rate,
        "window_s": args.rate_seconds,
        "starts_in_window": in_window,
        "measured_per_s": round(in_window / args.rate_seconds, 1),
        "off_by_pct": round(100 * (in_window / (args.rate * args.rate_seconds) - 1), 2),
        "busiest_second": max(per_s),
        "busiest_window_of_1_s": busiest,
        "bound_per_window": args.rate + gcra_burst(args.rate) - 1,
        "quietest_second": min(per_s),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        # CPU ms per job by part, over the whole phase (its jobs, its idle last seconds).
        "cpu_ms_per_job": {part: round(1000 * s / n, 2) for part, s in cpu.items()},
        "cpu_ms_per_job_total": round(1000 * sum(cpu.values()) / n, 2),
        "attempts_over_1": conn.execute(
            "SELECT count(*) FROM tasksapp_job WHERE queue = 'api' AND attempts <> 1"
        ).fetchone()[0],
    }


def main() -> None:
    args = parse()
    key = f"bench-routing-{uuid.uuid4().hex[:6]}"
    os.environ["BENCH_ROUTING_REDIS"] = BROKER_URL
    client = redis.Redis.from_url(BROKER_URL)
    with BenchDatabase("tempo_bench_routing") as db, db.connect() as conn:
        lead = {} if args.lead_ms is None else {"TEMPO_DISPATCH_LEAD_MS": str(args.lead_ms)}
        cluster = bench_cluster(db.url, "routing", **lead)
        try:
            for i in range(args.workers):
                cluster.worker(
                    f"w{i + 1}",
                    concurrency=args.concurrency,
                    pool=args.pool,
                    queues=("default", "bulk", "critical", "api"),
                )
            for i in range(args.dispatchers):
                cluster.dispatcher(f"d{i + 1}")
            time.sleep(10)  # processes up, partitions shared
            phases = args.phases.split(",")
            quiet = flood = rate = None
            if "quiet" in phases:
                quiet = quiet_phase(args, db, conn, key)
                print(json.dumps(quiet, indent=2), flush=True)
            if "flood" in phases:
                flood = flood_phase(args, db, conn, client, key)
                print(json.dumps(flood, indent=2), flush=True)
            if "rate" in phases:
                rate = rate_phase(args, conn, client, key, cluster)
                print(json.dumps(rate, indent=2), flush=True)
        finally:
            cluster.stop()
            for k in client.scan_iter(f"{key}*"):
                client.delete(k)
    results = {"args": vars(args), "quiet": quiet, "flood": flood, "rate": rate}
    path = write_json(args.out, results)
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
