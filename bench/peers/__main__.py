"""Peers on the exercise's workload: Tempo, Celery ETA tasks, procrastinate and Dramatiq
delayed messages, one after the other in one invocation, on a private PostgreSQL and a
private Redis, with the same jobs and the same kills.

    python -m bench.peers [--duration 600] [--only tempo,celery,...] [--seed 20190831]

procrastinate and Dramatiq are not dependencies of the service; install them first with
    .venv/bin/python -m pip install --require-hashes --no-deps -r requirements-peers.lock

Each scheduler runs 5 instances of 5 slots (Tempo: a dispatcher and a worker running 5
handlers at once; Celery: a worker -c 5; procrastinate: a worker of concurrency 5;
Dramatiq: a worker of 1 process and 5 threads). Of the 5 instances one gets SIGINT and
two get SIGKILL at the plan's moments (the whole process group: every process of the
instance). 40 s after the end the exercise's statistics are computed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import redis
from tqdm import tqdm

from bench.common import ROOT, machine, percentile, table, write_json
from bench.peers import schedulers
from bench.peers.plan import Plan, make_plan
from bench.peers.scoring import passed, per_job, score
from bench.practice.workload import LIVE_LEAD_SECONDS
from tests.processes.support import PrivatePostgres, PrivateRedis

SETTLE_SECONDS = 40  # the exercise waits MaxDelayTime + MinPrepareTime before scoring

COLUMNS = [
    "scheduler",
    "jobs",
    "missing",
    "duplicated",
    "early",
    "late",
    "avg_ms",
    "stdev_ms",
    "efficient",
    "p50_ms",
    "p95_ms",
    "max_ms",
    "pass",
    "cost",
    "jobs_table_scans_per_job",
    "xact_per_job",
    "redis_commands_per_job",
]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--instances", type=int, default=5)
    parser.add_argument("--slots", type=int, default=5, help="jobs at once per instance")
    parser.add_argument("--only", default=",".join(schedulers.NAMES), help="rows to run")
    parser.add_argument("--no-kills", action="store_true")
    parser.add_argument("--seed", type=int, default=20190831)
    parser.add_argument("--start-delay", type=float, default=30)
    parser.add_argument("--settle", type=float, default=SETTLE_SECONDS)
    parser.add_argument("--plot", default="docs/images/peers_delay.png")
    return parser.parse_args()


class Run:
    """One scheduler on the plan: its database, its processes, its events."""

    def __init__(self, peer: schedulers.Peer, plan: Plan, args, servers) -> None:
        self.peer, self.plan, self.args = peer, plan, args
        self.pg, self.redis = servers
        self.next_id = 0
        self.timeline: list[str] = []

    def execute(self) -> dict:
        database = f"tempo_h3_{self.peer.name.replace('-', '_')}"
        url = f"postgres://postgres@127.0.0.1:{self.pg.port}/{database}"
        with psycopg.connect(self.pg.url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{database}"')
        redis.Redis.from_url(self.redis.url).flushdb()
        logs = Path(tempfile.mkdtemp(prefix=f"bench-peers-{self.peer.name}-"))
        self.peer.prepare(url, self.redis.url, logs, self.args.slots)
        self.sql = psycopg.connect(url, autocommit=True)
        try:
            self._drive()
        finally:
            self.peer.stop()
        result = self._score()
        self.sql.close()
        print(f"{self.peer.name}: logs in {logs}", file=sys.stderr)
        return result

    def _drive(self) -> None:
        args, plan = self.args, self.plan
        t0 = time.time()
        since = t0 + args.start_delay
        self.enqueue([since + o for o in plan.upfront])
        self.sql.execute("SELECT pg_stat_reset()")
        redis.Redis.from_url(self.redis.url).config_resetstat()
        events = [(t0 + at, f"start i{i + 1}", i, None) for i, at in enumerate(plan.starts)]
        events += [(since + k.at, "", k.instance, k.signal) for k in plan.kills]
        events.sort(key=lambda e: e[0])
        live = [since + created for created, _ in plan.live]
        end = since + plan.duration + args.settle
        with tqdm(total=int(end - t0), desc=self.peer.name, unit="s") as bar:
            while time.time() < end:
                now = time.time()
                while events and events[0][0] <= now:
                    self._event(*events.pop(0), since=since)
                while live and live[0] <= now:
                    live.pop(0)
                    self.enqueue([now + LIVE_LEAD_SECONDS])
                bar.update(int(now - t0) - bar.n)
                time.sleep(0.02)

    def _event(self, at: float, what: str, instance: int, sig, *, since: float) -> None:
        if sig is None:
            self.peer.start(instance)
        else:
            self.peer.kill(instance, sig)
            what = f"{signal.Signals(sig).name} i{instance + 1}"
        self.timeline.append(f"{time.time() - since:+8.1f} s  {what}")

    def enqueue(self, run_at: list[float]) -> None:
        ids = list(range(self.next_id + 1, self.next_id + len(run_at) + 1))
        self.next_id += len(run_at)
        self.peer.enqueue(self.sql, list(zip(ids, run_at, strict=True)))

    def _score(self) -> dict:
        jobs = dict(self.sql.execute("SELECT id, run_at FROM peer_job").fetchall())
        executions = self.sql.execute(
            "SELECT job_id, began_at, executed_at FROM peer_execution"
        ).fetchall()
        result = score(jobs, executions)
        delays = [
            float(r[0])
            for r in self.sql.execute(
                "SELECT extract(epoch FROM min(e.executed_at) - j.run_at) * 1000"
                " FROM peer_job j JOIN peer_execution e ON e.job_id = j.id GROUP BY j.id"
            ).fetchall()
        ]
        cost = self.peer.cost(self.sql)
        commits = self.sql.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()[0]
        commands = sum(
            v["calls"]
            for k, v in redis.Redis.from_url(self.redis.url).info("commandstats").items()
            if k not in ("cmdstat_config", "cmdstat_info", "cmdstat_flushdb")
        )
        return {
            "scheduler": self.peer.label,
            **result,
            "p50_ms": round(percentile(delays, 0.50), 1),
            "p95_ms": round(percentile(delays, 0.95), 1),
            "max_ms": round(max(delays), 1) if delays else 0,
            "pass": "yes" if passed(result) else "no",
            **cost,
            "xact_per_job": per_job(commits, len(jobs)),
            "redis_commands_per_job": per_job(commands, len(jobs)),
            "after_run": self.peer.leftovers(self.sql, self.redis.url),
            "timeline": self.timeline,
            "delays": delays,
        }


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    for row in results:
        delays = sorted(row["delays"])
        if delays:
            share = [(i + 1) / row["jobs"] for i in range(len(delays))]
            ax.step(delays, share, where="post", label=row["scheduler"])
    ax.set_xscale("log")
    ax.set_xlabel("ExecuteAt − RunAt (ms, log scale)")
    ax.set_ylabel("share of all jobs executed by then")
    ax.set_title("Peers on the exercise's workload (5 instances, 3 stopped)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    args = parse()
    plan = make_plan(
        duration=args.duration, instances=args.instances, seed=args.seed, kills=not args.no_kills
    )
    load = os.getloadavg()
    pg, rds = PrivatePostgres().start(), PrivateRedis().start()
    results = []
    try:
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET track_functions = 'pl'")
            conn.execute("SELECT pg_reload_conf()")
        for name in args.only.split(","):
            peer = schedulers.make(name, longest_eta=args.start_delay + args.duration)
            results.append(Run(peer, plan, args, (pg, rds)).execute())
    finally:
        rds.stop()
        pg.stop()
    print(f"load average before: {load}, after: {os.getloadavg()}")
    print(table(results, COLUMNS))
    for row in results:
        print(f"{row['scheduler']}: {row['after_run']}")
        print("\n".join(row["timeline"]))
    image = ROOT / args.plot
    plot(results, image)
    path = write_json(
        "peers",
        {
            "args": vars(args),
            "machine": machine(),
            "load_average": {"before": load, "after": os.getloadavg()},
            "results": [{k: v for k, v in r.items() if k != "delays"} for r in results],
        },
    )
    print(f"wrote {path} and {image}", file=sys.stderr)


if __name__ == "__main__":
    main()
