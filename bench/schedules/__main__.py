"""Schedules: the planner's cost for 10,000 schedules, and how precisely runs start at
their fire times.

    python -m bench.schedules [--schedules 10000] [--precision-schedules 300] [--seconds 60]

1. Planning cost (no other processes): N schedules in several zones (every minute, every
   5 minutes, hourly, every 30 s elapsed) are created unplanned; then the planner's first
   pass (every fire within the 300 s horizon), a steady pass a minute later (the beat's
   every-minute run), an idle pass (nothing due), and the pure fire-time computation of
   every schedule's next hour, timed.
2. Fire-time precision (2 dispatchers, 1 worker, threads pool 8): M schedules firing
   every 5 s at staggered instants (M / 5 runs a second, evenly spread) and 20 on a
   6-field cron in five zones firing together, planned ahead by the same planner (run
   every 20 s here); the start lag of each run is `started_at − fire time` in database
   time (started_at: when the handler began).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time

from bench.common import BenchDatabase, bench_cluster, django_on, summary, table, write_json

NOOP = "tests.handlers.recording.noop"
ZONES = ["Europe/Berlin", "America/New_York", "Asia/Kolkata", "UTC", "Australia/Sydney"]
# (share of the schedules, cron, every)
MIX = [
    (0.4, "* * * * *", None),
    (0.3, "*/5 * * * *", None),
    (0.2, "0 * * * *", None),
    (0.1, "", dt.timedelta(seconds=30)),
]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--precision-schedules", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--skip-precision", action="store_true")
    parser.add_argument(
        "--plan-once",
        action="store_true",
        help="plan once at the start (the horizon covers the run): no planner pass beside",
    )
    return parser.parse_args()


def unplanned(count: int, *, now: dt.datetime, mix=MIX, prefix: str = "s") -> None:
    """`count` schedules, created as the service stores them but not yet planned."""
    from tasksapp.schedules.models import Schedule

    rows, start = [], 0
    for share, cron, every in mix:
        size = round(count * share)
        for i in range(start, start + size):
            rows.append(
                Schedule(
                    name=f"{prefix}{i}",
                    handler=NOOP,
                    cron=cron,
                    every=every,
                    timezone=ZONES[i % len(ZONES)],
                    delivery="at_least_once",
                    planned_until=now,
                    next_fire_at=now,
                    created_at=now,
                )
            )
        start += size
    Schedule.objects.bulk_create(rows, batch_size=2000)


def staggered(count: int, *, now: dt.datetime) -> None:
    """`count` schedules firing every 5 s, their fire times spread evenly over the 5 s
    (elapsed intervals, staggered starts), and 20 more on a 6-field cron in five zones
    that all fire at each fifth second together."""
    from tasksapp.schedules.models import Schedule

    step = dt.timedelta(seconds=5) / count
    rows = [
        Schedule(
            name=f"p{i}",
            handler=NOOP,
            every=dt.timedelta(seconds=5),
            start_at=now + i * step,
            delivery="at_least_once",
            planned_until=now,
            next_fire_at=now,
            created_at=now,
        )
        for i in range(count)
    ]
    rows += [
        Schedule(
            name=f"c{i}",
            handler=NOOP,
            cron="*/5 * * * * *",
            timezone=ZONES[i % len(ZONES)],
            delivery="at_least_once",
            planned_until=now,
            next_fire_at=now,
            created_at=now,
        )
        for i in range(20)
    ]
    Schedule.objects.bulk_create(rows)


def timed(call) -> tuple[float, object]:
    began = time.perf_counter()
    result = call()
    return (time.perf_counter() - began) * 1000, result


def planning_cost(count: int) -> list[dict]:
    import time_machine

    from tasksapp.engine.models import Job
    from tasksapp.schedules.models import Schedule
    from tasksapp.schedules.selectors import schedule_rule
    from tasksapp.schedules.services import schedules_plan_due

    now = dt.datetime.now(dt.UTC).replace(second=30, microsecond=0)
    unplanned(count, now=now)
    rows = []
    for name, at in (
        ("first pass (300 s ahead)", now),
        ("steady pass (+60 s)", now + dt.timedelta(minutes=1)),
        ("idle pass (nothing due)", now + dt.timedelta(minutes=1)),
    ):
        with time_machine.travel(at, tick=False):
            ms, plan = timed(schedules_plan_due)
        rows.append(
            {
                "pass": name,
                "schedules": plan.schedules,
                "jobs": plan.jobs,
                "ms": ms,
                "us_per_schedule_read": ms * 1000 / max(plan.schedules, 1),
                "us_per_job": ms * 1000 / plan.jobs if plan.jobs else float("nan"),
            }
        )
    schedules = list(Schedule.objects.all())
    began = time.perf_counter()
    fires = 0
    for schedule in schedules:
        rule = schedule_rule(schedule=schedule)
        fires += sum(1 for _ in rule.fires(after=now, until=now + dt.timedelta(hours=1)))
    ms = (time.perf_counter() - began) * 1000
    rows.append(
        {
            "pass": "fire times of the next hour, pure",
            "schedules": count,
            "jobs": fires,
            "ms": ms,
            "us_per_schedule_read": ms * 1000 / count,
            "us_per_job": ms * 1000 / fires,
        }
    )
    print(f"jobs in the table: {Job.objects.count()}", file=sys.stderr)
    Job.objects.all().delete()
    Schedule.objects.all().delete()
    return rows


def precision(db, count: int, seconds: float, *, plan_once: bool = False) -> dict:
    from django.db import connection

    from tasksapp.schedules.services import schedules_plan_due

    cluster = bench_cluster(db.url, "schedules")
    try:
        for name in ("d1", "d2"):
            cluster.dispatcher(name)
        cluster.worker("w1", concurrency=8)
        time.sleep(6)
        staggered(count, now=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=15))  # planned by then
        end = time.monotonic() + 15 + seconds
        schedules_plan_due()
        while time.monotonic() < end:
            time.sleep(min(20, max(0, end - time.monotonic())))
            if not plan_once:
                schedules_plan_due()  # the beat's task, more often than its minute
        from tasksapp.schedules.models import Schedule

        Schedule.objects.update(active=False)  # no more planning
        time.sleep(8)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT extract(epoch FROM j.started_at - r.fire_at) * 1000,"
                " extract(epoch FROM j.claimed_at - r.fire_at) * 1000, s.cron <> ''"
                " FROM tasksapp_schedulerun r JOIN tasksapp_job j ON j.id = r.job_id"
                " JOIN tasksapp_schedule s ON s.id = r.schedule_id"
                " WHERE j.state = 'succeeded' AND r.fire_at < clock_timestamp() - interval '5 s'"
            )
            found = cursor.fetchall()
            cursor.execute(
                "SELECT count(*) FROM tasksapp_schedulerun r JOIN tasksapp_job j ON j.id = r.job_id"
                " WHERE j.state <> 'succeeded' AND j.run_at < clock_timestamp() - interval '5 s'"
            )
            (not_run,) = cursor.fetchone()
            cursor.execute(
                "SELECT count(*) - count(DISTINCT (schedule_id, fire_at)) FROM tasksapp_schedulerun"
            )
            (duplicates,) = cursor.fetchone()
    finally:
        cluster.stop()
    return {
        "start_lag_ms": summary([float(r[0]) for r in found]),
        "start_lag_ms_interval": summary([float(r[0]) for r in found if not r[2]]),
        "start_lag_ms_cron": summary([float(r[0]) for r in found if r[2]]),
        "claim_lag_ms": summary([float(r[1]) for r in found]),
        "due_not_run": not_run,
        "duplicate_fires": duplicates,
        "started_early": sum(1 for r in found if r[0] < 0),
    }


def main() -> None:
    args = parse()
    with BenchDatabase("tempo_bench_schedules") as db:
        django_on(db.url)
        import tests.handlers.recording  # noqa: F401  (the no-op handler)

        cost = planning_cost(args.schedules)
        print(
            table(cost, ["pass", "schedules", "jobs", "ms", "us_per_schedule_read", "us_per_job"])
        )
        result = {"planning": cost}
        if not args.skip_precision:
            result["precision"] = precision(
                db, args.precision_schedules, args.seconds, plan_once=args.plan_once
            )
            p = result["precision"]
            measures = (
                "start_lag_ms",
                "start_lag_ms_interval",
                "start_lag_ms_cron",
                "claim_lag_ms",
            )
            rows = [{"measure": k, **p[k]} for k in measures]
            print(table(rows, ["measure", "n", "p50", "p95", "p99", "max", "avg"]))
            print(
                f"due but not run: {p['due_not_run']}, duplicate fires: {p['duplicate_fires']},"
                f" started early: {p['started_early']}"
            )
    path = write_json("schedules", {"args": vars(args), **result})
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
