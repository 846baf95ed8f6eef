"""Steady: Tempo's normal load — each member's work spread evenly over a period, so a
stream of jobs a few ms apart — what a job of it costs the machine and how late it
starts, as a curve over rates, beside peers on the same stream, in one run.

    python -m bench.steady [--rates 100 1000 3000] [--seconds 60] [--idle-seconds 20]
        [--deliveries at_least_once transactional]
        [--sides tempo celery-timer celery-eta django-tasks-db procrastinate]
        [--grace 15] [--until 00:58]

Everything runs on this machine: a private PostgreSQL server with pg_stat_statements
(bench.capacity.measure.StatementsPostgres) and a private Redis, so their CPU is the
bench's alone. Each side runs two processes that run jobs (bench/steady/sides.py):

- tempo: one dispatcher and two Celery workers `prefork -c 1`, jobs of the no-op handler
  (tests.handlers.recording.noop) inserted up front, due evenly, for each delivery;
- celery-timer: raw Celery, two workers `prefork -c 1`, a timer process sending each
  task when it is due; celery-eta: the same workers, every task sent up front with
  `apply_async(eta=...)`;
- django-tasks-db: two `manage.py db_worker` (bench/tasks_backends/settings.py);
- procrastinate: two workers of concurrency 1, jobs deferred with their `schedule_at`.

Per side, rate (and delivery): fresh processes run a warm-up, then `rate` jobs a second
are due for `--seconds` from an instant; the window measured runs from the first due
until every job started or `--grace` seconds after the last was due (a rate the side
cannot keep up with ends with jobs left, discarded, and the side runs no higher rate:
the curve goes as far as each side goes). For the window: CPU ms a job by process kind
(PostgreSQL's whole tree and each backend, Redis, the dispatcher or timer, the workers'
main and pool processes), WAL bytes a job (and beside it the WAL of the insert before
the window, a job), the top statements with calls a job, start lag p50/p99 (started −
due: the jobs table for Tempo and django-tasks-db, a file the peers' tasks append to for
Celery and procrastinate), jobs run twice (Tempo: attempts > 1; the file peers: a key
started twice) and started early. Before the rates, per side, the idle cost: CPU ms a
second with nothing due for `--idle-seconds`. What happens before the first due is
outside every window: Tempo's and django-tasks-db's inserts (Tempo's with its trigram
indexes' pending entries flushed), procrastinate's defers, the ETA sends and the Celery
workers' receipt of them; the timer's sends are inside. Lags are those of the jobs that
started.

Run it niced (`nice -n 19`): the bench sets the processes it measures (the servers and
each side's processes) back to the normal priority, and its own loop only sleeps and
polls once a second while a window is open. Results: bench/results/steady.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.capacity import measure
from bench.capacity.measure import StatementsPostgres
from bench.common import table, write_json
from bench.steady import report, wal
from bench.steady.meter import Window, unnice
from bench.steady.sides import SIDES, Side
from tests.processes.support import PrivateRedis

SETTLE_SECONDS = 3  # after the warm-up, before an idle window: the start-up's tail gone
WAL_RELATIONS = 16  # the relations and kinds of record that wrote most, per run
WAL_COLUMNS = ["relation", "record", "B/job", "of it full pages", "records/job"]
STOP_SECONDS = 20  # what a run takes beyond its window: start, warm-up, stop, discard


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[100, 1000, 3000])
    parser.add_argument("--seconds", type=float, default=60, help="how long jobs come due")
    parser.add_argument("--idle-seconds", type=float, default=20)
    parser.add_argument("--grace", type=float, default=15, help="s after the last due")
    parser.add_argument(
        "--deliveries", nargs="+", default=["at_least_once", "transactional"], help="tempo's"
    )
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=list(SIDES))
    parser.add_argument("--until", default="", help="HH:MM UTC: no run ends after it")
    return parser.parse_args()


def deadline(until: str) -> float:
    if not until:
        return float("inf")
    hour, minute = map(int, until.split(":"))
    now = dt.datetime.now(dt.UTC)
    at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return (at if at > now else at + dt.timedelta(days=1)).timestamp()


class Servers:
    """The private PostgreSQL and Redis, at the normal priority."""

    def __enter__(self) -> Servers:
        self.postgres = StatementsPostgres().start()
        self.postmaster = self.postgres.postmaster_pid()
        self.redis = PrivateRedis().start()
        unnice(self.postmaster)
        unnice(self.redis.process.pid)
        self.url = self.postgres.url.rsplit("/", 1)[0]
        return self

    def window(self, side: Side) -> Window:
        return Window(side.sql, self.postmaster, self.redis.process.pid, side.processes)

    def __exit__(self, *exc) -> None:
        self.redis.stop()
        self.postgres.stop()


def idle_cost(side: Side, servers: Servers, seconds: float) -> dict:
    side.ready()
    try:
        time.sleep(SETTLE_SECONDS)
        with servers.window(side) as window:
            time.sleep(seconds)
    finally:
        side.stop()
    return report.cpu_ms_per_second(window.cpu, seconds)


def wait_started(side: Side, jobs: int, until: float) -> None:
    while time.time() < until and side.started() < jobs:
        time.sleep(1.0)


def steady_run(side: Side, servers: Servers, rate: float, args, delivery: str) -> dict:
    jobs = int(rate * args.seconds)
    side.ready()
    try:
        at = time.time() + side.lead(jobs)
        before = measure.snapshot(side.sql, servers.postmaster)
        side.schedule(rate, jobs, at, delivery)
        inserted = measure.wal_bytes(
            side.sql, before, measure.snapshot(side.sql, servers.postmaster)
        )
        time.sleep(max(0.0, at - time.time()))
        with servers.window(side) as window:
            time.sleep(max(0.0, at + args.seconds - time.time()))
            wait_started(side, jobs, at + args.seconds + args.grace)
            end = time.time()
        outcome = side.outcome(jobs)
    finally:
        side.stop()
        side.discard()
    return {
        **summarize(side, rate, delivery, jobs, at, end, window, outcome),
        "insert_wal_bytes_per_job": round(inserted / jobs),
    }


def summarize(side, rate, delivery, jobs, at, end, window: Window, outcome: dict) -> dict:
    pairs = [(due, started) for due, started in outcome["pairs"]]
    within = [started for _, started in pairs if started is not None and started <= end]
    done = len(within)
    lag = report.lags(pairs)
    return {
        "side": side.name,
        "delivery": delivery,
        "rate": rate,
        "jobs": jobs,
        "done": done,
        "jobs_per_s": round(done / max(max(within, default=at) - at, jobs / rate)),
        "twice": "—" if outcome["twice"] is None else outcome["twice"],
        "early": lag["early"],
        "not_started": lag["not_started"],
        "lag_p50_ms": lag["lag_p50_ms"],
        "lag_p99_ms": lag["lag_p99_ms"],
        "lag_max_ms": lag["lag_max_ms"],
        "cpu_s": {k: round(v, 3) for k, v in window.cpu.items()},
        "cpu_ms_per_job": report.cpu_ms_per_job(window.cpu, done),
        "wal_bytes_per_job": round(window.wal / done) if done else "",
        "wal_by_relation": wal.by_relation(
            window.conn, window.before.wal_lsn, window.after.wal_lsn, done
        )[:WAL_RELATIONS],
        "backends": report.backend_rows(window.backends, done),
        "statements": report.statement_rows(window.statements, done),
    }


def run_side(side: Side, servers: Servers, args, idle: dict, stop_at: float) -> list[dict]:
    runs = []
    side.create()
    try:
        if args.idle_seconds and (side.idle_as or side.name) not in idle:
            idle[side.idle_as or side.name] = idle_cost(side, servers, args.idle_seconds)
        for delivery in args.deliveries if side.name == "tempo" else [""]:
            for rate in args.rates:
                if time.time() + args.seconds + args.grace + STOP_SECONDS > stop_at:
                    print(f"{side.name} {delivery} {rate:g}/s: skipped (--until)", file=sys.stderr)
                    continue
                runs.append(steady_run(side, servers, rate, args, delivery))
                print(table([report.curve_row(runs[-1])], report.CURVE_COLUMNS), flush=True)
                if runs[-1]["done"] < runs[-1]["jobs"]:
                    print(
                        f"{side.name} {delivery}: behind at {rate}/s, no higher rate",
                        file=sys.stderr,
                    )
                    break
    finally:
        side.drop()
    return runs


def main() -> None:
    args = parse()
    stop_at = deadline(args.until)
    load_before = os.getloadavg()
    logs = Path(tempfile.mkdtemp(prefix="bench-steady-"))
    idle: dict[str, dict] = {}
    runs: list[dict] = []
    with Servers() as servers:
        for name in args.sides:
            side = SIDES[name](server_url=servers.url, broker_url=servers.redis.url, logs=logs)
            runs += run_side(side, servers, args, idle, stop_at)
    load_after = os.getloadavg()
    print_results(runs, idle, load_before, load_after)
    path = write_json(
        "steady",
        {
            "args": vars(args),
            "load_average": {"before": load_before, "after": load_after},
            "idle_cpu_ms_per_s": idle,
            "runs": runs,
        },
    )
    print(f"wrote {path}; logs in {logs}", file=sys.stderr)


def print_results(runs: list[dict], idle: dict, load_before, load_after) -> None:
    print(f"\nload average before: {load_before}, after: {load_after}")
    print("\nTempo: CPU ms a job by process kind, lag, WAL, by rate\n")
    tempo = [r for r in runs if r["side"] == "tempo"]
    print(table([report.curve_row(r) for r in tempo], report.CURVE_COLUMNS))
    print("\nSide by side, by rate\n")
    by_rate = sorted(runs, key=lambda r: (r["rate"], r["side"] != "tempo"))
    print(table([report.curve_row(r) for r in by_rate], report.CURVE_COLUMNS))
    print("\nIdle: CPU ms a second, nothing due\n")
    rows = [report.idle_row(side, figures) for side, figures in idle.items()]
    print(table(rows, list(rows[0]) if rows else []))
    for r in runs:
        what = f"{r['side']} {r['delivery']} {r['rate']:g}/s".replace("  ", " ")
        print(f"\n{what}: PostgreSQL processes by CPU\n")
        print(table(r["backends"], ["process", "last query", "CPU ms/job"]))
        print(f"\n{what}: top statements\n")
        print(table(r["statements"], list(r["statements"][0]) if r["statements"] else []))
        print(f"\n{what}: WAL by relation\n")
        print(table(r["wal_by_relation"], WAL_COLUMNS))


if __name__ == "__main__":
    main()
