"""Django Tasks backends side by side: Tempo's (`tasksapp.backends.TempoBackend`) and
django-tasks-db's (`django_tasks_db.DatabaseBackend` with `manage.py db_worker`), on the
same workloads, the same kills, one private PostgreSQL and Redis.

    python -m bench.tasks_backends [--tasks 1000] [--rate 50] [--seconds 20]
                                   [--variants 1,5] [--slots 2] [--db-interval 1]
                                   [--task-ms 0]

django-tasks-db is not a dependency of the service; install it first with
    .venv/bin/python -m pip install --require-hashes --no-deps -r requirements-peers.lock

The project is bench/tasks_backends/settings.py (both backends, one database); the tasks
are bench/tasks_backends/tasks.py (`noop`, and `write`, which inserts a row). Each backend
runs `--slots` tasks at once: Tempo a dispatcher and a worker of a prefork pool of that
many processes; django-tasks-db that many `db_worker` processes (one task at a time each).

- burst: `--tasks` noop tasks enqueued in one transaction; the enqueue's rate; tasks/s
  from its commit to the last finished_at; CPU a task of the backend's processes, of the
  private PostgreSQL (the enqueue's inserts included) and Redis; database commits a task.
- spread: `--rate` noop tasks a second for `--seconds`, each with its `run_after`; start
  lag (started_at − run_after, from each backend's rows) p50/p99/max, early starts.
- kill: `--tasks` write tasks (each working `--task-ms` after its insert) enqueued at
  once, every worker process SIGKILLed (whole session) at evenly spaced points of the
  burst (once, and `--variants` times), a fresh worker started at once; then tasks not
  SUCCESSFUL (lost), rows missing, rows written twice (doubled), runs the kills cut
  short. A run ends when every task finished, or, for django-tasks-db, when nothing is
  READY and each RUNNING task was claimed by a killed worker (nothing runs it again), or
  after `--stall` seconds without progress.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import psycopg

from bench.common import ROOT, machine, table, write_json
from bench.tasks_backends.counting import exactly_once, kill_points, ratio, start_lags_ms
from bench.tasks_backends.meter import Meter
from bench.tasks_backends.sides import SETTINGS, DatabaseSide, Side, TempoSide
from tests.processes.support import PrivatePostgres, PrivateRedis

READY_SECONDS = 120
# PostgreSQL's statistics of a session that went idle reach pg_stat_database within 10 s
# (PGSTAT_IDLE_INTERVAL); the idle polls meanwhile (db_worker's, each second) add ≤ 0.03
# commits a task.
STATS_SECONDS = 11
PREFIX = "bench_h5_"  # the bench's database on the private server, dropped at the end


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000, help="tasks of a burst")
    parser.add_argument("--rate", type=float, default=50, help="spread: tasks a second")
    parser.add_argument("--seconds", type=float, default=20, help="spread: how long")
    parser.add_argument("--variants", default="1,5", help="kills a burst, comma-separated")
    parser.add_argument("--slots", type=int, default=2, help="tasks at once per backend")
    parser.add_argument("--db-interval", type=float, default=1.0, help="db_worker --interval")
    parser.add_argument("--lead", type=float, default=5, help="spread: first run_after, s")
    parser.add_argument("--task-ms", type=float, default=0, help="kill: each task's work")
    parser.add_argument("--stall", type=float, default=60, help="s without progress: stop")
    parser.add_argument("--only", default="tempo,django-tasks-db", help="backends to run")
    return parser.parse_args()


def wait_finished(side: Side, label: str, *, n: int, stall: float, at_least: int = 0) -> int:
    """Wait until `at_least` (else all `n`) tasks of `label` finished, or nothing can run
    any more, or no progress for `stall` seconds; the count finished."""
    target = at_least or n
    done, progress = 0, time.monotonic()
    while True:
        if not side.alive():
            raise RuntimeError(f"{side.name}: a process ended; logs in {side.logs}")
        count = side.finished(label)
        if count != done:
            done, progress = count, time.monotonic()
        if done >= target or (not at_least and side.stuck(label)):
            return done
        if time.monotonic() - progress > stall:
            print(f"{side.name} {label}: no progress for {stall:g} s", file=sys.stderr)
            return done
        time.sleep(0.1)


def commits() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return cursor.fetchone()[0]


def burst(side: Side, args, meter: Meter) -> dict:
    from django.db import transaction

    from bench.tasks_backends.tasks import noop

    label, n = f"{side.name}:burst", args.tasks
    cpu, xacts = meter.read(side), commits()
    started = time.time()
    with transaction.atomic():
        side.enqueue(noop, label, range(n))
    committed = time.time()
    wait_finished(side, label, n=n, stall=args.stall)
    rows = side.rows(label)
    last = max(row[4] for row in rows if row[4] is not None)
    cpu = Meter.spent(cpu, meter.read(side))
    time.sleep(STATS_SECONDS)
    return {
        "burst_enqueue_per_s": round(n / (committed - started)),
        "burst_tasks_per_s": round(n / (float(last) - committed)),
        "burst_successful": sum(1 for row in rows if row[1] == "SUCCESSFUL"),
        **{f"burst_cpu_{part}_ms": round(s * 1000 / n, 2) for part, s in cpu.items()},
        "burst_cpu_ms": round(sum(cpu.values()) * 1000 / n, 2),
        "burst_commits_per_task": round((commits() - xacts) / n, 2),
    }


def spread(side: Side, args) -> dict:
    from django.db import transaction

    from bench.tasks_backends.tasks import noop

    label = f"{side.name}:spread"
    n = int(args.rate * args.seconds)
    base = time.time() + args.lead
    due = [dt.datetime.fromtimestamp(base + i / args.rate, tz=dt.UTC) for i in range(n)]
    with transaction.atomic():
        side.enqueue(noop, label, range(n), run_after=due)
    if time.time() > base:
        print(f"{side.name}: enqueued after the first run_after; raise --lead", file=sys.stderr)
    time.sleep(max(0.0, base + args.seconds - time.time()))
    wait_finished(side, label, n=n, stall=args.stall)
    lags = start_lags_ms([(float(r[2]), r[3] and float(r[3])) for r in side.rows(label)])
    return {f"spread_{k}": v for k, v in lags.items()}


def burst_kill(side: Side, args, kills: int) -> dict:
    from django.db import connection, transaction

    from bench.tasks_backends.tasks import write

    label, n = f"{side.name}:kill{kills}", args.tasks
    started = time.monotonic()
    with transaction.atomic():
        side.enqueue(write, label, range(n), ms=args.task_ms)
    at_kill = []  # tasks finished at each kill: the kill fell inside the burst if < n
    for point in kill_points(n, kills):
        at_kill.append(wait_finished(side, label, n=n, stall=args.stall, at_least=point))
        side.kill_workers()
        side.start_workers()
    wait_finished(side, label, n=n, stall=args.stall)
    seconds = time.monotonic() - started
    statuses = {row[0]: row[1] for row in side.rows(label)}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT key, count(*) FROM bench_effect WHERE label = %s GROUP BY 1", [label]
        )
        effects = Counter(dict(cursor.fetchall()))
    counted = exactly_once(range(n), statuses, effects)
    counted["cut_runs"] = side.cut_runs(label)
    left = counted.pop("left")
    return {
        **{f"kill{kills}_{k}": v for k, v in counted.items() if k != "tasks"},
        f"kill{kills}_seconds": round(seconds, 1),
        f"kill{kills}_left": left,
        f"kill{kills}_finished_at_kills": at_kill,
    }


def warm_up(side: Side, args) -> None:
    """The processes up and running tasks before anything is measured."""
    from bench.tasks_backends.tasks import noop

    label = f"{side.name}:warm-up"
    side.enqueue(noop, label, range(args.slots * 2))
    done = wait_finished(side, label, n=args.slots * 2, stall=READY_SECONDS)
    if done < args.slots * 2:
        raise RuntimeError(f"{side.name} never ran its warm-up tasks; logs in {side.logs}")


def run_side(side: Side, args, variants: list[int], meter: Meter) -> dict:
    side.start()
    try:
        warm_up(side, args)
        result = {"backend": side.label, **burst(side, args, meter), **spread(side, args)}
        for kills in variants:
            result.update(burst_kill(side, args, kills))
        return result
    finally:
        side.stop()


FIGURES = [
    ("burst", "enqueue (tasks/s, one transaction)", "burst_enqueue_per_s"),
    ("burst", "throughput (tasks/s)", "burst_tasks_per_s"),
    ("burst", "SUCCESSFUL", "burst_successful"),
    ("burst", "CPU of the backend's processes (ms/task)", "burst_cpu_processes_ms"),
    ("burst", "CPU of PostgreSQL (ms/task)", "burst_cpu_postgres_ms"),
    ("burst", "CPU of Redis (ms/task)", "burst_cpu_redis_ms"),
    ("burst", "CPU in all (ms/task)", "burst_cpu_ms"),
    ("burst", "database commits/task", "burst_commits_per_task"),
    ("spread", "start lag p50 (ms)", "spread_lag_p50_ms"),
    ("spread", "start lag p99 (ms)", "spread_lag_p99_ms"),
    ("spread", "start lag max (ms)", "spread_lag_max_ms"),
    ("spread", "early", "spread_early"),
    ("spread", "never started", "spread_not_started"),
]
KILL_FIGURES = [
    ("lost (not SUCCESSFUL)", "lost"),
    ("rows missing", "rows_missing"),
    ("doubled (row written twice)", "doubled"),
    ("runs cut by the kills (Tempo: run again)", "cut_runs"),
    ("seconds from the enqueue to the end", "seconds"),
]

# Counts of tasks: side by side without a ratio.
COUNTS = ("successful", "early", "not_started", "lost", "rows_missing", "doubled", "cut_runs")


def side_by_side(results: dict[str, dict], args, variants: list[int]) -> list[dict]:
    tempo, db = results.get("tempo", {}), results.get("django-tasks-db", {})
    figures = list(FIGURES)
    for kills in variants:
        times = "once" if kills == 1 else f"{kills} times"
        figures += [
            (f"burst-kill ({times})", what, f"kill{kills}_{key}") for what, key in KILL_FIGURES
        ]
    rows = []
    for workload, what, key in figures:
        a, b = tempo.get(key, ""), db.get(key, "")
        numeric = all(isinstance(v, int | float) for v in (a, b)) and not key.endswith(COUNTS)
        rows.append(
            {
                "workload": workload,
                "figure": what,
                "tempo": a,
                "django-tasks-db": b,
                "tempo / django-tasks-db": ratio(a, b) if numeric else "",
            }
        )
    return rows


def main() -> None:
    args = parse()
    variants = [int(v) for v in args.variants.split(",") if v.strip()]
    load = os.getloadavg()
    pg, rds = PrivatePostgres().start(), PrivateRedis().start()
    database = f"{PREFIX}{uuid.uuid4().hex[:6]}"
    url = f"postgres://postgres@127.0.0.1:{pg.port}/{database}"
    results: dict[str, dict] = {}
    logs = Path(tempfile.mkdtemp(prefix="bench-tasks-backends-"))
    try:
        with psycopg.connect(pg.url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{database}"')
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "BENCH_TASKS_DATABASE_URL": url,
            "BENCH_TASKS_BROKER_URL": rds.url,
            "PYTHONPATH": str(ROOT),
        }
        os.environ.update(env)
        setup_django()
        meter = Meter(
            postmaster_pid=int((pg.dir / "postmaster.pid").read_text().split()[0]),
            redis_pid=rds.process.pid,
        )
        sides = {
            "tempo": TempoSide(env=env, logs=logs, slots=args.slots),
            "django-tasks-db": DatabaseSide(
                env=env, logs=logs, slots=args.slots, interval=args.db_interval
            ),
        }
        for name in args.only.split(","):
            print(f"running {sides[name].label}", file=sys.stderr)
            results[name] = run_side(sides[name], args, variants, meter)
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(pg.url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        rds.stop()
        pg.stop()
    after = os.getloadavg()
    print(f"load average before: {load}, after: {after}")
    print(
        f"{args.tasks:,} tasks a burst; spread {args.rate:g}/s for {args.seconds:g} s; "
        f"burst-kill tasks work {args.task_ms:g} ms; {args.slots} tasks at once each:"
    )
    for result in results.values():
        print(f"  {result['backend']}")
    print(table(side_by_side(results, args, variants), COLUMNS))
    for name, result in results.items():
        for kills in variants:
            print(
                f"{name}, killed {kills}×: finished at the kills"
                f" {result[f'kill{kills}_finished_at_kills']} of {args.tasks};"
                f" not SUCCESSFUL by status: {result[f'kill{kills}_left']}"
            )
    path = write_json(
        "tasks_backends",
        {
            "args": vars(args),
            "machine": machine(),
            "load_average": {"before": load, "after": after},
            "results": results,
        },
    )
    print(f"wrote {path}; logs in {logs}", file=sys.stderr)


COLUMNS = ["workload", "figure", "tempo", "django-tasks-db", "tempo / django-tasks-db"]


def setup_django() -> None:
    import django
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    from bench.tasks_backends.tasks import EFFECT_TABLE  # tasks: once the apps are loaded

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(EFFECT_TABLE)


if __name__ == "__main__":
    main()
