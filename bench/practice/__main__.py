"""The scheduling-practice exercise, ported faithfully, with the naive demo side by side.

    python -m bench.practice [--duration 600] [--instances 5] [--no-kills]

Two fresh databases get the same workload at the same moments: ours (dispatchers +
Celery workers) and the exercise's naive demo scheduler. In HA mode three instances of
each are stopped at the same random moments before the end (one SIGINT, two SIGKILL) and
one of our Celery workers is SIGKILLed. 40 s after the end the exercise's statistics are
computed for both.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tqdm import tqdm

from bench.common import ROOT, BenchDatabase, bench_cluster, table, write_json
from bench.practice import naive
from bench.practice.handlers import EXECUTIONS_TABLE
from bench.practice.workload import LIVE_LEAD_SECONDS, live_sleep, upfront_offsets

HANDLER = "bench.practice.handlers.process_locked_job"
MAX_DELAY_MS = 30_000
SETTLE_SECONDS = 40  # the exercise waits MaxDelayTime + MinPrepareTime before scoring

INSERT_OURS = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT %(handler)s, '{}', r, 'scheduled', 0, 5, '{"delays": [1, 2, 5]}', 'at_least_once',
    md5(random()::text || r::text), 0, '', '', '[]'
FROM unnest(%(run_at)s::timestamptz[]) AS r
"""
INSERT_NAIVE = "INSERT INTO jobs (run_at) SELECT unnest(%(run_at)s::timestamptz[])"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--instances", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8, help="Celery worker processes")
    parser.add_argument("--threads", type=int, default=5, help="executions per worker")
    parser.add_argument(
        "--one-per-message",
        action="store_true",
        help="one job per message and -c THREADS per worker, instead of "
        "batches run side by side by a -c 1 worker",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the dispatchers and workers (repeatable)",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="round trip between our processes and PostgreSQL and Redis (a delaying proxy "
        "in front of each; the bench's own connection stays direct)",
    )
    parser.add_argument("--no-kills", action="store_true", help="no HA kills")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--seed", type=int, default=20190831)
    parser.add_argument("--start-delay", type=float, default=30)
    return parser.parse_args()


@dataclass
class Event:
    at: float
    what: str
    action: object = field(repr=False)


class Practice:
    def __init__(self, args, ours: BenchDatabase, baseline: BenchDatabase | None) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.ours, self.baseline = ours, baseline
        self.ours_sql = ours.connect()
        self.naive_sql = baseline.connect() if baseline else None
        # By default a dispatcher's share of a burst travels in messages of up to
        # --threads jobs; each worker takes one message at a time and runs its handlers
        # side by side (never more than --threads at once per process).
        batching = {} if args.one_per_message else {"TEMPO_BATCH_PARALLELISM": str(args.threads)}
        self.proxies = []
        self.cluster = bench_cluster(
            ours.url,
            "practice",
            **batching,
            **self._latency(args.latency_ms, ours.url),
            **dict(item.split("=", 1) for item in args.env),
        )
        self.naive_procs: dict[str, subprocess.Popen] = {}
        self.events: list[Event] = []
        self.timeline: list[str] = []

    def _latency(self, round_trip_ms: float, database_url: str) -> dict[str, str]:
        """Put a delaying proxy in front of PostgreSQL and Redis for our processes."""
        if not round_trip_ms:
            return {}
        from bench.common import BROKER_URL
        from tests.cluster.delay_proxy import DelayProxy

        urls = {}
        for key, url in (("DATABASE_URL", database_url), ("CELERY_BROKER_URL", BROKER_URL)):
            parsed = urlsplit(url)
            proxy = DelayProxy(
                target=f"{parsed.hostname}:{parsed.port}", delay_ms=round_trip_ms / 2
            )
            self.proxies.append(proxy)
            user = f"{parsed.username}@" if parsed.username else ""
            urls[key] = parsed._replace(netloc=f"{user}127.0.0.1:{proxy.port}").geturl()
        return urls

    # -- workload ---------------------------------------------------------------------
    def create(self, run_at: list[dt.datetime]) -> None:
        self.ours_sql.execute(INSERT_OURS, {"handler": HANDLER, "run_at": run_at})
        if self.naive_sql:
            self.naive_sql.execute(INSERT_NAIVE, {"run_at": run_at})

    def prepare(self) -> None:
        self.ours_sql.execute(EXECUTIONS_TABLE)
        if self.naive_sql:
            self.naive_sql.execute(naive.SCHEMA)
        self.t0 = time.time()
        self.since = self.t0 + self.args.start_delay
        self.until = self.since + self.args.duration
        offsets = upfront_offsets(self.args.duration, self.rng)
        self.create([_ts(self.since + o) for o in offsets])
        self.upfront = len(offsets)
        self.ours_sql.execute("SELECT pg_stat_reset()")

    # -- processes --------------------------------------------------------------------
    def plan(self) -> None:
        per_worker = self.args.threads if self.args.one_per_message else 1
        for i in range(self.args.workers):
            self.cluster.worker(f"w{i + 1}", concurrency=per_worker)
        names = [f"d{i + 1}" for i in range(self.args.instances)]
        for name in names:
            at = self.t0 + self.rng.uniform(0, 9)
            self.events.append(Event(at, f"start {name}", lambda n=name: self.start(n)))
        if not self.args.no_kills:
            victims = self.rng.sample(names, 3)
            moments = sorted(self.rng.uniform(self.since, self.until - 10) for _ in victims)
            for name, at, sig in zip(
                victims, moments, [signal.SIGINT, signal.SIGKILL, signal.SIGKILL], strict=True
            ):
                label = f"{signal.Signals(sig).name} {name}"
                self.events.append(Event(at, label, lambda n=name, s=sig: self.kill(n, s)))
            worker = f"w{self.rng.randrange(self.args.workers) + 1}"
            at = self.rng.uniform(self.since, self.until - 10)
            self.events.append(
                Event(
                    at,
                    f"SIGKILL worker {worker}",
                    lambda: self.cluster.kill(worker, signal.SIGKILL),
                )
            )
        self.next_live = time.time() + live_sleep(self.rng)
        self.live = 0

    def start(self, name: str) -> None:
        self.cluster.dispatcher(name)
        if self.baseline:
            self.naive_procs[name] = subprocess.Popen(
                [sys.executable, "-m", "bench.practice.naive", self.baseline.url, name],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def kill(self, name: str, sig: int) -> None:
        self.cluster.kill(name, sig)
        if name in self.naive_procs:
            self.naive_procs[name].send_signal(sig)

    def run(self) -> None:
        end = self.until + SETTLE_SECONDS
        pending = sorted(self.events, key=lambda e: e.at)
        with tqdm(total=int(end - self.t0), desc="practice", unit="s") as bar:
            while time.time() < end:
                now = time.time()
                while pending and pending[0].at <= now:
                    event = pending.pop(0)
                    event.action()
                    self.timeline.append(f"{now - self.since:+8.1f} s  {event.what}")
                if now >= self.next_live and now + 10 < self.until:
                    self.create([_ts(now + LIVE_LEAD_SECONDS)])
                    self.live += 1
                    self.next_live = now + live_sleep(self.rng)
                bar.update(int(now - self.t0) - bar.n)
                time.sleep(0.02)

    def stop(self) -> None:
        self.cluster.stop()
        for proxy in self.proxies:
            proxy.stop()
        for process in self.naive_procs.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            process.wait(timeout=15)


def _ts(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


# -- scoring ----------------------------------------------------------------------------


def score(
    delays: list[float],
    *,
    total: int,
    completed: int,
    duplicates: int,
    early: int,
    polls: int,
    lost: int,
    reads: int,
) -> dict:
    avg = int(statistics.fmean(delays)) if delays else 0  # the exercise's AVG of integers
    stdev = statistics.stdev(delays) if len(delays) > 1 else 0.0
    late = sum(1 for d in delays if d > MAX_DELAY_MS)
    return {
        "jobs": total,
        "completed": completed,
        "executed_twice": duplicates,
        "started_early": early,
        "late": late,
        "list_queries": polls,
        "failed_claims": lost,
        "single_reads": reads,
        "cost": polls * 100 + lost * 10 + reads,
        "delay_avg_ms": avg,
        "delay_stdev_ms": round(stdev, 2),
        "efficient": round(avg + stdev, 2),
        "pass": completed == total and duplicates == 0 and early == 0 and late == 0,
    }


def score_ours(conn) -> tuple[dict, list[float], dict]:
    total = conn.execute("SELECT count(*) FROM tasksapp_job").fetchone()[0]
    rows = conn.execute("""
        SELECT j.id, count(e.id), extract(epoch FROM min(e.executed_at) - j.run_at) * 1000,
               j.state = 'succeeded', j.started_at < j.run_at
        FROM tasksapp_job j LEFT JOIN practice_execution e ON e.job_id = j.id
        GROUP BY j.id""").fetchall()
    delays = [float(r[2]) for r in rows if r[1]]
    counters = conn.execute("""
        SELECT COALESCE(sum(polls), 0), COALESCE(sum(claims_lost), 0),
               COALESCE(sum(single_reads), 0), COALESCE(sum(statements), 0),
               COALESCE(sum(reaped), 0), COALESCE(sum(notifications), 0)
        FROM tasksapp_dispatchercounter""").fetchone()
    result = score(
        delays,
        total=total,
        completed=sum(1 for r in rows if r[1] and r[3]),
        duplicates=sum(1 for r in rows if r[1] > 1),
        early=sum(1 for r in rows if r[4]),
        polls=counters[0],
        lost=counters[1],
        reads=counters[2],
    )
    return result, delays, cross_check(conn, total, counters)


def cross_check(conn, total: int, counters) -> dict:
    """The database's own view: scans of the jobs table, transactions per job."""
    table_stats = conn.execute("""
        SELECT seq_scan, idx_scan, n_tup_ins, n_tup_upd FROM pg_stat_user_tables
        WHERE relname = 'tasksapp_job'""").fetchone()
    commits = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()[0]
    return {
        "jobs_table_seq_scans": table_stats[0],
        "jobs_table_index_scans": table_stats[1],
        "jobs_table_row_updates": table_stats[3],
        "dispatcher_jobs_table_statements": counters[3],
        "reaped": counters[4],
        "notifications": counters[5],
        "transactions_per_job": round(commits / max(total, 1), 2),
        "dispatcher_statements_per_job": round(counters[3] / max(total, 1), 3),
    }


def phases(conn) -> list[dict]:
    """Where the delay goes: run_at → claimed → started → executed (ms percentiles)."""
    from bench.common import summary

    spans = {
        "run_at → claimed": "j.claimed_at - j.run_at",
        "claimed → started": "j.started_at - j.claimed_at",
        "started → handler began": "e.began_at - j.started_at",
        "handler began → executed (83 ms of work)": "e.executed_at - e.began_at",
        "run_at → executed": "e.executed_at - j.run_at",
    }
    rows = []
    for name, span in spans.items():
        values = [
            float(r[0])
            for r in conn.execute(
                f"SELECT extract(epoch FROM {span}) * 1000 FROM tasksapp_job j"
                " JOIN practice_execution e ON e.job_id = j.id"
            ).fetchall()
        ]
        rows.append({"phase": name, **summary(values)})
    return rows


def score_naive(conn) -> tuple[dict, list[float]]:
    total = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    delays = [
        float(r[0])
        for r in conn.execute(
            "SELECT extract(epoch FROM execute_at - run_at) * 1000 FROM jobs WHERE state = 2"
        ).fetchall()
    ]
    actions = dict(
        conn.execute("SELECT action, count(*) FROM worker_logs GROUP BY action").fetchall()
    )
    duplicates = conn.execute(
        "SELECT count(*) FROM (SELECT job_id FROM worker_logs WHERE action = 'COMPLETE'"
        " GROUP BY job_id HAVING count(*) > 1) d"
    ).fetchone()[0]
    result = score(
        delays,
        total=total,
        completed=len(delays),
        duplicates=duplicates,
        early=0,
        polls=actions.get("QUERYLIST", 0),
        lost=actions.get("ACQUIRE_FAILURE", 0),
        reads=actions.get("QUERYJOB", 0),
    )
    return result, delays


def plot(ours: list[float], naive_delays: list[float] | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if naive_delays else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4), squeeze=False)
    axes[0][0].hist([min(d, 200) for d in ours], bins=80, color="#2b7bba")
    axes[0][0].set_title("Tempo: ExecuteAt − RunAt (ms, clipped at 200)")
    axes[0][0].set_xlabel("ms")
    axes[0][0].set_ylabel("jobs")
    if naive_delays:
        axes[0][1].hist([d / 1000 for d in naive_delays], bins=80, color="#d95f02")
        axes[0][1].set_title("Naive demo: ExecuteAt − RunAt (s)")
        axes[0][1].set_xlabel("s")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    args = parse()
    baseline = None if args.no_baseline else BenchDatabase("tempo_practice_naive", migrate=False)
    with BenchDatabase("tempo_practice") as ours:
        if baseline:
            baseline.__enter__()
        practice = Practice(args, ours, baseline)
        try:
            practice.prepare()
            practice.plan()
            practice.run()
        finally:
            practice.stop()
        ours_result, ours_delays, check = score_ours(practice.ours_sql)
        breakdown = phases(practice.ours_sql)
        rows = [{"scheduler": "tempo", **ours_result}]
        naive_delays = None
        if baseline:
            naive_result, naive_delays = score_naive(practice.naive_sql)
            rows.append({"scheduler": "naive demo", **naive_result})
            ratio = {
                k: round(naive_result[k] / max(ours_result[k], 1e-9), 1)
                for k in ("cost", "efficient")
            }
            rows.append({"scheduler": "naive / tempo", **ratio})
        practice.ours_sql.close()
        if practice.naive_sql:
            practice.naive_sql.close()
        if baseline:
            baseline.__exit__(None, None, None)
    columns = [
        "scheduler",
        "jobs",
        "completed",
        "executed_twice",
        "started_early",
        "late",
        "list_queries",
        "failed_claims",
        "single_reads",
        "cost",
        "delay_avg_ms",
        "delay_stdev_ms",
        "efficient",
        "pass",
    ]
    print(table(rows, columns))
    print(table([check], list(check)))
    print(table(breakdown, ["phase", "p50", "p95", "p99", "max", "avg"]))
    print("\n".join(practice.timeline))
    image = ROOT / "docs" / "images" / "practice_delay.png"
    plot(ours_delays, naive_delays, image)
    path = write_json(
        "practice",
        {
            "args": vars(args),
            "results": rows,
            "cross_check": check,
            "phases": breakdown,
            "timeline": practice.timeline,
            "upfront": practice.upfront,
            "live": practice.live,
            "plot": str(image.relative_to(ROOT)),
        },
    )
    print(f"wrote {path} and {image}", file=sys.stderr)


if __name__ == "__main__":
    main()
