"""One run of the growth simulation in its own database (DATABASE_URL): a daily recurring
task for N members over D simulated days, with or without retention. Started by
`python -m bench.growth`, which reads the JSON it prints last.

Compressed time. Each simulated day: the real planner (`plan_due_slices`, as beat runs it
at 00:00) plans the day's 24 slices into jobs through the real set-based insert; then the
day's occurrences are "run" by writing them finished with realistic timestamps (claimed
40 ms before run_at, started 1-30 ms after it, finished 50 ms later; 1 % dead after three
attempts), one UPDATE per simulated hour, instead of executing them; then retention runs
once for the day (beat would run it every 5 minutes; `retention_run(now=end of day)`,
which also rebuilds the jobs table's bloated indexes), or, without retention, only the
rollups are written; then `VACUUM ANALYZE tasksapp_job` stands in for the day's
autovacuum runs, in both variants (a compressed day lasts seconds, autovacuum's nap is a
minute; and the shared bench server runs with autovacuum off, so without it the planner's
statistics would describe day 1 for ever). The simulated calendar lies days ahead of the
real clock, so none of its jobs is due for the probe below.

Measured at the end of each day: the jobs table's and its indexes' size; WAL written and
dead rows left that day; the planner's time per slice (`SlicePlan.duration_ms`); the
dashboard overview (`dashboard_overview`, 7 calls, p95); a steady probe: 40 jobs due
one every 50 ms (real time), each polled, claimed, started and finished through the job
store's statements (POLL_DUE, CLAIM_DUE, START_CLAIMED, SUCCEED_RUNNING) when it is due,
as a dispatcher and a worker would: claim latency (poll + claim) and start lag p99.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time

import django

SLICES = 24
PROBE_JOBS = 40
PROBE_STEP_S = 0.05
OVERVIEW_CALLS = 7
FILL_CHUNK = 100_000

RUN_DAY_HOUR = """
UPDATE tasksapp_job SET
    state = CASE WHEN random() < 0.01 THEN 'dead' ELSE 'succeeded' END,
    lease_token = 1, claimed_by = 'sim', claimed_at = run_at - interval '40 ms',
    started_at = run_at + make_interval(secs => 0.001 + 0.029 * random() ^ 3),
    finished_at = run_at + interval '80 ms', attempts = 1
WHERE state = 'scheduled' AND run_at >= %(since)s AND run_at < %(until)s
"""
FIX_DEAD = """
UPDATE tasksapp_job SET attempts = 3, errors = '[{"attempt": 1}, {"attempt": 2}, {"attempt": 3}]',
    last_error = 'simulated'
WHERE state = 'dead' AND attempts = 1 AND finished_at >= %(since)s AND finished_at < %(until)s
"""
PROBE_INSERT = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT 'tasksapp.demo.handlers.noop', '{}',
    clock_timestamp() + make_interval(secs => 0.3 + i * %(step)s), 'scheduled', 0, 1, '{}',
    'transactional', 'probe:' || %(day)s || ':' || i, 0, '', '', '[]'
FROM generate_series(0, %(count)s - 1) AS i
RETURNING id, extract(epoch FROM run_at)::float8
"""


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", choices=["retention", "none"], required=True)
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=60)
    return parser.parse_args()


def main() -> None:
    args = parse()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")
    django.setup()
    from django.db import connection

    fill_members(connection, args.members)
    task, epoch = create_task()
    days = []
    for day in range(args.days):
        days.append(simulate_day(connection, task, epoch, day, args.variant))
        row = days[-1]
        print(
            f"  {args.variant:9} day {day + 1:>2}: jobs {row['job_rows']:>9,} rows,"
            f" table {row['table_mb']:7.1f} MB + indexes {row['index_mb']:7.1f} MB,"
            f" claim p99 {row['claim_p99_ms']:5.2f} ms, lag p99 {row['lag_p99_ms']:5.2f} ms,"
            f" overview p95 {row['overview_p95_ms']:6.1f} ms,"
            f" slice {row['slice_ms']:6.1f} ms, retention {row['retention_s']:5.1f} s,"
            f" vacuum {row['vacuum_s']:5.1f} s, rebuilt {len(row['rebuilt'])}",
            file=sys.stderr,
            flush=True,
        )
    print(json.dumps({"variant": args.variant, "members": args.members, "days": days}))


def fill_members(connection, members: int) -> None:
    from tasksapp.recurring import sql as planning_sql

    with connection.cursor() as cursor:
        for start in range(0, members, FILL_CHUNK):
            params = {"prefix": "m-", "start": start, "stop": min(start + FILL_CHUNK, members)}
            cursor.execute(planning_sql.INSERT_GOLDEN_MEMBERS, params)
        cursor.execute("ANALYZE tasksapp_member")


def create_task():
    from django.utils import timezone

    from tasksapp.recurring.models import RecurringTask

    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    epoch = today + dt.timedelta(days=3)  # ahead of the real clock (see the docstring)
    task = RecurringTask.objects.create(
        name="growth: daily",
        handler="tasksapp.recurring.handlers.sync_member",
        epoch=epoch,
        period=dt.timedelta(days=1),
        slices=SLICES,
        max_attempts=3,
    )
    return task, epoch


def simulate_day(connection, task, epoch: dt.datetime, day: int, variant: str) -> dict:
    from tasksapp.recurring.models import SlicePlan
    from tasksapp.recurring.services import plan_due_slices
    from tasksapp.retention.services import retention_run, rollup_write

    start, end = epoch + dt.timedelta(days=day), epoch + dt.timedelta(days=day + 1)
    wal_before = wal_lsn(connection)
    plan_due_slices(now=start)
    slice_ms = [
        plan.duration_ms
        for plan in SlicePlan.objects.filter(task=task, starts_at__gte=start, starts_at__lt=end)
    ]
    with connection.cursor() as cursor:
        for hour in range(24):
            window = {
                "since": start + dt.timedelta(hours=hour),
                "until": start + dt.timedelta(hours=hour + 1),
            }
            cursor.execute(RUN_DAY_HOUR, window)
        cursor.execute(FIX_DEAD, {"since": start, "until": end + dt.timedelta(hours=1)})
    began = time.perf_counter()
    removed, rebuilt = 0, []
    if variant == "retention":
        report = retention_run(now=end)
        removed, rebuilt = report.removed.get("jobs", 0), report.rebuilt
    else:
        rollup_write(now=end)
    retention_s = time.perf_counter() - began
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE tasksapp_job")  # a day of autovacuum, in one go
    vacuum_s = time.perf_counter() - began
    wal_bytes = wal_lsn(connection) - wal_before
    claims, lags = probe(connection, day)
    overview = overview_times(end)
    table, index, rows, dead = table_stats(connection)
    return {
        "day": day + 1,
        "job_rows": rows,
        "table_mb": table / 2**20,
        "index_mb": index / 2**20,
        "dead_rows": dead,
        "wal_mb": wal_bytes / 2**20,
        "removed": removed,
        "rebuilt": rebuilt,
        "retention_s": retention_s,
        "vacuum_s": vacuum_s,
        "slice_ms": sum(slice_ms) / len(slice_ms) if slice_ms else 0.0,
        "slices": len(slice_ms),
        "claim_p99_ms": p99(claims),
        "claim_p50_ms": percentile(claims, 0.5),
        "lag_p99_ms": p99(lags),
        "lag_p50_ms": percentile(lags, 0.5),
        "overview_p95_ms": percentile(overview, 0.95),
    }


def wal_lsn(connection) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        return int(cursor.fetchone()[0])


def table_stats(connection) -> tuple[int, int, int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_table_size('tasksapp_job'), pg_indexes_size('tasksapp_job'),"
            " (SELECT count(*) FROM tasksapp_job),"
            " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'tasksapp_job')"
        )
        return cursor.fetchone()


def probe(connection, day: int) -> tuple[list[float], list[float]]:
    """Claim latency (poll + claim, ms) and start lag (ms) of the probe's jobs."""
    from tasksapp.engine.store import job_store
    from tasksapp.engine.store.rows import PollWindow

    store = job_store()
    with connection.cursor() as cursor:
        cursor.execute(PROBE_INSERT, {"step": PROBE_STEP_S, "count": PROBE_JOBS, "day": day})
        due = sorted(cursor.fetchall(), key=lambda row: row[1])
    claims, lags = [], []
    window = PollWindow(lookahead=0.04, partitions=16, owned=list(range(16)), limit=100)
    for job_id, run_at in due:
        time.sleep(max(0.0, run_at - 0.04 - time.time()))  # the dispatch lead
        began = time.perf_counter()
        ids = [row.id for row in store.poll_due(window)]
        claimed = store.claim_due(ids=ids or [job_id], owner="probe", ttl=10, lead=0.04)
        claims.append((time.perf_counter() - began) * 1000)
        for claim in claimed:
            started = store.start(claims=[(claim.id, claim.token)], worker="probe", ttl=10, lead=1)
            # The handler begins at run_at, or when the start returned if that was later.
            lags.append(max(0.0, time.time() - run_at) * 1000)
            time.sleep(max(0.0, run_at - time.time()))
            store.succeed(outcomes=[(job.id, job.token, None, None) for job in started])
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM tasksapp_job WHERE idempotency_key LIKE 'probe:%%'")
    return claims, lags


def overview_times(now: dt.datetime) -> list[float]:
    from tasksapp.web.selectors.dashboard import dashboard_overview

    times = []
    for _ in range(OVERVIEW_CALLS):
        began = time.perf_counter()
        dashboard_overview(now=now)
        times.append((time.perf_counter() - began) * 1000)
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def p99(values: list[float]) -> float:
    return percentile(values, 0.99)


if __name__ == "__main__":
    main()
