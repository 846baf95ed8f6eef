"""Bursts: N no-op jobs due at the same instant, against raw Celery in the same run.

    python -m bench.burst [--sizes 10000 100000] [--dispatchers 2] [--workers 2]
                          [--pools prefork threads]

For each size: a fresh database gets N no-op jobs all due at one instant; dispatchers and
Celery workers (prefork by default; `--pools prefork threads` runs each size under both
pools, side by side) run them; we report the time from the run time to the last
start, jobs/s and start-lag percentiles. Then raw Celery on the same machine and broker
publishes and consumes N no-op tasks (one message per task), and transactional-mode jobs
are measured beside the default at-least-once no-op jobs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import redis
from tqdm import tqdm

from bench.common import BROKER_URL, ROOT, BenchDatabase, bench_cluster, summary, table, write_json
from bench.cpu import cpu_by_part, cpu_spent
from tests.processes.support import Cluster

NOOP = "tests.handlers.recording.noop"
INSERT = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT %(handler)s, '{}', to_timestamp(%(at)s), 'scheduled', 0, 5, '{"delays": [1]}',
    %(delivery)s, md5(random()::text || i), 0, '', '', '[]'
FROM generate_series(1, %(n)s) AS i
"""


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dispatchers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--concurrency", type=int, default=2, help="pool slots each (-c)")
    parser.add_argument(
        "--pools",
        nargs="+",
        choices=["prefork", "threads"],
        default=["prefork"],
        help="Celery pools of the workers: each size runs under each",
    )
    parser.add_argument("--transactional-size", type=int, default=10_000)
    parser.add_argument("--no-raw", action="store_true", help="skip raw Celery")
    return parser.parse_args()


def worker_args(cluster: Cluster, name: str, concurrency: int, pool: str = "prefork") -> list[str]:
    celery = str(Path(sys.executable).with_name("celery"))
    return [
        celery,
        "-A",
        "schedapp",
        "worker",
        "-Q",
        cluster.queue,
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-n",
        f"{name}.{cluster.queue}@%h",  # the queue in the node name: see purge_queue
        "--without-gossip",
        "--without-mingle",
        "--include",
        "bench.burst.raw_tasks",
        "--loglevel=WARNING",
    ]


def wait_done(conn, n: int, timeout: float) -> None:
    with tqdm(total=n, desc="started", unit="job", leave=False) as bar:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = conn.execute(
                "SELECT count(*) FROM tasksapp_job WHERE state = 'succeeded'"
            ).fetchone()[0]
            bar.update(done - bar.n)
            if done >= n:
                return
            time.sleep(0.5)
    raise SystemExit(f"only {bar.n} of {n} jobs finished within {timeout} s")


def tempo_burst(args, n: int, delivery: str, pool: str = "prefork") -> dict:
    with BenchDatabase("tempo_bench_burst") as db, db.connect() as conn:
        cluster = bench_cluster(db.url, "burst")
        at = time.time() + 30 + n / 20_000  # time to insert and for dispatchers to poll
        conn.execute(INSERT, {"handler": NOOP, "at": at, "n": n, "delivery": delivery})
        try:
            for i in range(args.workers):
                name = f"w{i + 1}"
                cluster._start(name, worker_args(cluster, name, args.concurrency, pool))
            for i in range(args.dispatchers):
                cluster.dispatcher(f"d{i + 1}")
            # From a second before the run time (claims come some ms ahead of it).
            time.sleep(max(0.0, at - 1 - time.time()))
            cpu_before = cpu_by_part(cluster)
            time.sleep(max(0.0, at - time.time()))
            wait_done(conn, n, timeout=600)
            cpu = cpu_spent(cpu_before, cpu_by_part(cluster))
        finally:
            cluster.stop()
        lags = [
            float(r[0])
            for r in conn.execute(
                "SELECT extract(epoch FROM started_at - run_at) * 1000 FROM tasksapp_job"
            ).fetchall()
        ]
        claims = [
            float(r[0])
            for r in conn.execute(
                "SELECT extract(epoch FROM claimed_at - run_at) * 1000 FROM tasksapp_job"
            ).fetchall()
        ]
        last_start = max(lags) / 1000
        early = conn.execute(
            "SELECT count(*) FROM tasksapp_job WHERE started_at < run_at"
        ).fetchone()[0]
        twice = conn.execute("SELECT count(*) FROM tasksapp_job WHERE attempts <> 1").fetchone()[0]
    lag, claim = summary(lags), summary(claims)
    return {
        "mode": f"tempo {delivery}",
        "pool": pool,
        "jobs": n,
        "last_start_s": round(last_start, 2),
        "jobs_per_s": round(n / last_start),
        "lag_p50_ms": round(lag["p50"]),
        "lag_p95_ms": round(lag["p95"]),
        "lag_p99_ms": round(lag["p99"]),
        "claim_p50_ms": round(claim["p50"]),
        "claim_max_ms": round(claim["max"]),
        "started_early": early,
        "not_exactly_one_attempt": twice,
        "cpu_s": ", ".join(f"{k} {v:.2f}" for k, v in _cpu_by_kind(cpu).items()),
    }


def _cpu_by_kind(cpu: dict[str, float]) -> dict[str, float]:
    """CPU seconds between a second before the run time and the last job's end, by kind
    of process: the workers' main processes, their pool children, the dispatchers, the
    servers (cluster processes are named w1, w1 pool, d1, ...)."""
    kinds: dict[str, float] = {}
    for part, seconds in cpu.items():
        name, _, pool = part.partition(" ")
        kind = {"w": "worker main", "d": "dispatchers"}.get(name.rstrip("0123456789"), name)
        kind = "worker pool" if pool else kind
        kinds[kind] = round(kinds.get(kind, 0.0) + seconds, 2)
    return kinds


def raw_celery(args, n: int) -> dict:
    """Publish n no-op tasks (one message each) and time until the last one ran."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")
    os.environ["CELERY_BROKER_URL"] = BROKER_URL
    import django

    django.setup()
    from schedapp.celery import app

    key = f"bench-raw-{uuid.uuid4().hex[:6]}"
    client = redis.Redis.from_url(BROKER_URL)
    cluster = Cluster(
        database_url="postgres://unused",
        broker_url=BROKER_URL,
        queue=key,
        logs=Path(tempfile.mkdtemp(prefix="bench-raw-")),
    )
    try:
        for i in range(args.workers):
            cluster._start(f"w{i + 1}", worker_args(cluster, f"w{i + 1}", args.concurrency))
        time.sleep(8)
        began = time.time()
        with app.producer_or_acquire() as producer:
            for _ in tqdm(range(n), desc="publish", unit="msg", leave=False):
                app.send_task("bench.raw_noop", args=[key], queue=key, producer=producer)
        published = time.time()
        with tqdm(total=n, desc="consumed", unit="msg", leave=False) as bar:
            while int(client.get(f"{key}:done") or 0) < n:
                bar.update(int(client.get(f"{key}:done") or 0) - bar.n)
                time.sleep(0.5)
        last = float(client.get(f"{key}:last"))
    finally:
        cluster.stop()
        for k in client.scan_iter(f"*{key}*"):
            client.delete(k)
    elapsed = last - began
    return {
        "mode": "raw celery (1 msg/task)",
        "pool": "prefork",
        "jobs": n,
        "last_start_s": round(elapsed, 2),
        "jobs_per_s": round(n / elapsed),
        "publish_per_s": round(n / (published - began)),
    }


def main() -> None:
    args = parse()
    rows = []
    for n in args.sizes:
        tempos = [tempo_burst(args, n, "at_least_once", pool) for pool in args.pools]
        if args.no_raw:
            rows += tempos
            print(table(rows[-len(tempos) :], COLUMNS), flush=True)
            continue
        *others, tempo = tempos
        rows += others
        raw = raw_celery(args, n)
        rows += [
            tempo,
            raw,
            {
                "mode": "tempo / raw celery",
                "jobs": n,
                "jobs_per_s": round(tempo["jobs_per_s"] / raw["jobs_per_s"], 1),
            },
        ]
        print(table(rows[-3:], COLUMNS), flush=True)
    if args.transactional_size:
        for pool in args.pools:
            rows.append(tempo_burst(args, args.transactional_size, "transactional", pool))
    print(table(rows, COLUMNS))
    path = write_json("burst", {"args": vars(args), "results": rows})
    print(f"wrote {path}", file=sys.stderr)


COLUMNS = [
    "mode",
    "pool",
    "jobs",
    "last_start_s",
    "jobs_per_s",
    "publish_per_s",
    "lag_p50_ms",
    "lag_p95_ms",
    "lag_p99_ms",
    "claim_p50_ms",
    "claim_max_ms",
    "started_early",
    "not_exactly_one_attempt",
    "cpu_s",
]

if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    psycopg  # noqa: B018 - imported for BenchDatabase connections
    main()
