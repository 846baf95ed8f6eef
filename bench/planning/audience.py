"""Audiences at scale: evenness, the sync pass and a slice's cost over N auth users.

    python -m bench.planning.audience [--users 1000000 3000000] [--skip-random] [--slices 24]

For each population, against a fresh database of its own (dropped at the end):
N `auth.User` rows and N plain members (no audience) filled by set-based SQL
(INSERT ... SELECT generate_series) with the two tables' secondary indexes and unique
constraints dropped, built again after the fill (one sort each, not N insertions), then
VACUUM ANALYZE; then

1. three daily tasks over `auth.User` with `audience_filter={"is_active": True}` and
   golden phases (their own shifts), then three with `phase_strategy="random"`; each
   task's first `audience_sync` timed (the first golden one creates the N members, the
   others only join them), wall time and the CPU of the database backend that ran it
   (/proc of the connection's backend, same host);
2. evenness of each task and of the sum of the three of a strategy: jobs in the busiest
   second of the day / the mean per second, computed in SQL from the audience members'
   phases with the planner's own run-time expression (floor(phase x period_us), as
   MEMBER_SLICE_AUDIENCE), so the whole day is counted without planning 3N jobs;
3. one slice (1/24 of the day) planned through `slice_plan` -- the service the planner
   runs -- for a task without audience (its N plain members) and for a golden audience
   task, --repeats slices each, wall time and backend CPU; the members' query alone is
   shown with EXPLAIN (ANALYZE, BUFFERS);
4. 10 % of the users deactivated through `QuerySet.update(is_active=False)` (no
   signals), then every task's `audience_sync` timed (members leaving, their planned
   jobs cancelled) and evenness of what is left.

With --private-postgres the databases are made on a PostgreSQL server of the bench's own
(initdb, pg_ctl: tests/processes/support.py), started under `nice -n 19` with
--pg-setting name=value settings, so its load yields to other benchmarks on the machine;
removed at the end. The results file is written after each step, so a run stopped early
keeps what finished.

Results: bench/results/planning-audience.json and the "bench/planning/audience" section of
docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import BenchDatabase, machine, table, write_json
from bench.planning.__main__ import postgres_version

FILL_CHUNK = 500_000
DAY_US = 86_400 * 1_000_000
HANDLER = "tasksapp.recurring.handlers.sync_member"
TICKS = os.sysconf("SC_CLK_TCK")

FILL_USERS = """
INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email,
                       is_staff, is_active, date_joined)
SELECT '!', false, 'user' || n, '', '', '', false, true, now()
FROM generate_series(%(start)s::bigint, %(stop)s::bigint - 1) AS n
"""

# Jobs per second of the day for the members of `tasks`, from their phases in each task:
# the second of floor(phase * period_us) microseconds, as the planner computes run_at.
PER_SECOND = """
SELECT s, count(*) FROM (
    SELECT floor(floor(am.phase * %(period_us)s::float8) / 1000000)::int AS s
    FROM tasksapp_audiencemember am JOIN tasksapp_member m ON m.id = am.member_id
    WHERE am.task_id = ANY(%(tasks)s) AND m.active) x
GROUP BY s
"""
# The audience slice's members as planned before audience_member_slice_idx (migration
# 0025): joined to the members for their active flag, over the index on (task, phase) of
# every row. Measured beside the current statement, in the same database and sitting.
FORMER_INDEX = "CREATE INDEX audience_member_phase_idx ON tasksapp_audiencemember (task_id, phase)"
FORMER_SLICE = """
    SELECT am.member_id AS id,
           %(period_start)s::timestamptz
               + floor(am.phase * %(period_us)s::float8) * interval '1 microsecond' AS run_at
    FROM tasksapp_audiencemember am JOIN tasksapp_member m ON m.id = am.member_id AND m.active
    WHERE am.task_id = %(task_id)s AND am.phase >= %(phase_from)s AND am.phase < %(phase_to)s
      AND (%(member_ids)s::bigint[] IS NULL OR am.member_id = ANY(%(member_ids)s::bigint[]))
      AND (%(joined_at)s::timestamptz IS NULL OR am.joined_at = %(joined_at)s)"""

# The filled tables' secondary indexes (all but the primary key) and the unique
# constraints they back: dropped before the fill, made again after it.
SECONDARY_INDEXES = """
SELECT c.relname, pg_get_indexdef(i.indexrelid), con.conname, pg_get_constraintdef(con.oid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
LEFT JOIN pg_constraint con
       ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid AND con.contype = 'u'
WHERE i.indrelid = %(table)s::regclass AND NOT i.indisprimary
ORDER BY c.relname
"""
FILLED_TABLES = ("auth_user", "tasksapp_member")

PEAK = f"""
SELECT coalesce(max(count), 0), coalesce(sum(count), 0), count(*) FROM ({PER_SECOND}) p
"""


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--slices", type=int, default=24, help="slices of the daily period")
    parser.add_argument("--repeats", type=int, default=3, help="slices planned per kind")
    parser.add_argument("--skip-random", action="store_true", help="golden tasks only")
    parser.add_argument(
        "--skip-former", action="store_true", help="no slices with the former statement"
    )
    parser.add_argument("--churn", type=float, default=0.10, help="share of users deactivated")
    parser.add_argument("--name", default="planning-audience", help="results file name")
    parser.add_argument(
        "--reconcile-tasks", type=int, default=3, help="tasks of each strategy reconciled"
    )
    parser.add_argument(
        "--private-postgres", action="store_true", help="a niced server of the bench's own"
    )
    parser.add_argument(
        "--pg-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the private server (repeatable)",
    )
    return parser.parse_args()


def backend_cpu() -> float:
    """CPU seconds used so far by the default connection's PostgreSQL backend."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def measured(call) -> tuple[dict, object]:
    """Wall seconds, database-backend CPU seconds and this process's CPU of `call()`, and
    the wall seconds of its statements that took 0.1 s or more (by their name in sql.py)."""
    from django.db import connection

    statements: dict[str, float] = {}

    def timed(execute, sql_text, params, many, context):
        began = time.perf_counter()
        try:
            return execute(sql_text, params, many, context)
        finally:
            seconds = time.perf_counter() - began
            if seconds >= 0.1:
                name = statement_name(sql_text)
                statements[name] = round(statements.get(name, 0.0) + seconds, 2)

    cpu, own, wall = backend_cpu(), time.process_time(), time.perf_counter()
    with connection.execute_wrapper(timed):
        result = call()
    wall = time.perf_counter() - wall
    return {
        "wall_s": round(wall, 3),
        "db_cpu_s": round(backend_cpu() - cpu, 2),
        "py_cpu_s": round(time.process_time() - own, 2),
        "statements": statements,
    }, result


def statement_name(text: str) -> str:
    """The sql.py name of a statement of the pass or the planner, else its first words."""
    words = " ".join(text.split())
    for marker, name in (
        ("INSERT INTO tempo_audience", "AUDIENCE_TEMP_FILL"),
        ("WITH new AS", "AUDIENCE_MEMBERS_CREATE"),
        ("gone AS ( DELETE FROM tasksapp_audiencemember", "AUDIENCE_LEAVE"),
        ("INSERT INTO tasksapp_audiencemember", "AUDIENCE_JOIN"),
        ("joined AS (", "AUDIENCE_RESTORE"),
        ("WITH gone AS ( DELETE FROM tasksapp_member", "AUDIENCE_ORPHANS_DELETE"),
        ("WITH slice AS", "slice insert"),
    ):
        if marker in words:
            return name
    return words[:40]


def fill(conn, users: int) -> dict:
    """The users and plain members, set-based, their secondary indexes built after."""
    from tasksapp.recurring import sql as planning_sql

    began = time.perf_counter()
    dropped = [drop_secondary(conn, table) for table in FILLED_TABLES]
    for start in range(0, users, FILL_CHUNK):
        stop = min(start + FILL_CHUNK, users)
        conn.execute(FILL_USERS, {"start": start, "stop": stop})
        conn.execute(
            planning_sql.INSERT_GOLDEN_MEMBERS, {"prefix": "member-", "start": start, "stop": stop}
        )
        print(f"\r  users and plain members {stop:>12,} / {users:,}", end="", flush=True)
    print()
    filled = time.perf_counter()
    for relation, indexes in zip(FILLED_TABLES, dropped, strict=True):
        for _, definition, constraint, constraint_definition in indexes:
            if constraint:
                conn.execute(f'ALTER TABLE {relation} ADD CONSTRAINT "{constraint}" '
                             f"{constraint_definition}")  # fmt: skip
            else:
                conn.execute(definition)
    indexed = time.perf_counter()
    for relation in FILLED_TABLES:
        conn.execute(f"VACUUM ANALYZE {relation}")
    return {
        "seconds": round(time.perf_counter() - began, 1),
        "rows_s": round(filled - began, 1),
        "indexes_s": round(indexed - filled, 1),
    }


def drop_secondary(conn, relation: str) -> list[tuple]:
    """Drop the table's secondary indexes and unique constraints; their definitions."""
    indexes = conn.execute(SECONDARY_INDEXES, {"table": relation}).fetchall()
    for name, _, constraint, _ in indexes:
        if constraint:
            conn.execute(f'ALTER TABLE {relation} DROP CONSTRAINT "{constraint}"')
        else:
            conn.execute(f'DROP INDEX "{name}"')
    return indexes


def make_task(name: str, slices: int, epoch: datetime, **audience):
    from tasksapp.recurring.services import recurring_task_create

    return recurring_task_create(
        name=name, handler=HANDLER, period=timedelta(days=1), slices=slices, epoch=epoch, **audience
    )


def evenness(conn, tasks: list[int]) -> dict:
    peak, total, seconds_used = conn.execute(PEAK, {"tasks": tasks, "period_us": DAY_US}).fetchone()
    mean = total / 86_400
    return {
        "jobs": int(total),
        "mean_per_s": round(mean, 2),
        "peak_per_s": int(peak),
        "peak_mean": round(peak / mean, 3) if mean else None,
        "idle_seconds": 86_400 - int(seconds_used),
    }


def plan_slices(task, slices: int, repeats: int, epoch: datetime) -> list[dict]:
    from tasksapp.recurring.services import slice_plan

    runs = []
    for n in range(repeats):
        index = (n * slices) // repeats + 1
        cost, plan = measured(
            lambda index=index: slice_plan(
                task=task, period=0, slice_index=index, now=epoch - timedelta(days=1)
            )
        )
        runs.append({"slice": index, "jobs": plan.jobs_planned, **cost})
        print(f"    {task.name} slice {index}: {plan.jobs_planned:,} jobs, {cost}")
    return runs


def plan_former(conn, task, slices: int, repeats: int, epoch: datetime) -> list[dict]:
    """Slices of `task` planned with the former statement and its index."""
    from tasksapp.recurring import sql

    current = sql.MEMBER_SLICE_AUDIENCE
    conn.execute(FORMER_INDEX)
    conn.execute("ANALYZE tasksapp_audiencemember")
    sql.MEMBER_SLICE_AUDIENCE = FORMER_SLICE
    try:
        runs = plan_slices(task, slices, repeats, epoch)
        explain = explain_slice(task, slices, 5, epoch)
    finally:
        sql.MEMBER_SLICE_AUDIENCE = current
        conn.execute("DROP INDEX audience_member_phase_idx")
    return runs, explain


def explain_slice(task, slices: int, index: int, epoch: datetime) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the slice's members' query alone."""
    from django.db import connection

    from tasksapp.recurring import sql
    from tasksapp.recurring.schedule import slice_bounds

    low, high = slice_bounds(index, slices)
    params = {
        "period_start": epoch,
        "period_us": DAY_US,
        "phase_from": low,
        "phase_to": high,
        "member_ids": None,
        "task_id": task.id,
        "joined_at": None,
    }
    query = sql.MEMBER_SLICE_AUDIENCE if task.audience else sql.MEMBER_SLICE
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + query, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def run_size(users: int, args, out: dict, save, server: str = "") -> dict:
    from django.contrib.auth.models import User
    from django.db import connection, connections
    from django.db.models.expressions import RawSQL

    from tasksapp.recurring.services import audience_sync

    out["users"] = users
    with BenchDatabase("bench_h6_audience", server=server) as db, db.connect() as conn:
        os.environ["DATABASE_URL"] = db.url
        connections.close_all()
        connections["default"].settings_dict["NAME"] = db.name
        print(f"{users:,} users: filling")
        out["fill"] = fill(conn, users)
        print(f"  filled {out['fill']}")
        save()
        epoch = datetime(2030, 1, 1, tzinfo=UTC)  # ahead: every member is planned
        audience = {"audience": "auth.User", "audience_filter": {"is_active": True}}
        strategies = ["golden"] + ([] if args.skip_random else ["random"])
        tasks: dict[str, list] = {}
        out["sync"] = []
        for strategy in strategies:
            tasks[strategy] = []
            for n in range(3):
                task = make_task(
                    f"{strategy}-{n}", args.slices, epoch, **audience, phase_strategy=strategy
                )
                cost, done = measured(lambda task=task: audience_sync(task=task))
                row = {"task": task.name, "joined": done.joined, **cost}
                out["sync"].append(row)
                print(f"  first sync {row}")
                save()
                tasks[strategy].append(task)
        # What autovacuum does after the first syncs' inserts (the plain members had theirs).
        conn.execute("VACUUM ANALYZE tasksapp_audiencemember")
        conn.execute("VACUUM ANALYZE tasksapp_member")
        out["evenness"] = []
        for strategy, group in tasks.items():
            for task in group:
                out["evenness"].append({"strategy": strategy, "of": task.name,
                                        **evenness(conn, [task.id])})  # fmt: skip
            out["evenness"].append(
                {"strategy": strategy, "of": "sum of 3", **evenness(conn, [t.id for t in group])}
            )
        for row in out["evenness"]:
            print(f"  evenness {row}")
        save()

        plain = make_task("plain", args.slices, epoch)
        out["slices"] = {"plain": plan_slices(plain, args.slices, args.repeats, epoch)}
        out["explain"] = {"plain": explain_slice(plain, args.slices, 5, epoch)}
        if not args.skip_former:
            former = tasks["golden"][1]
            runs, explain = plan_former(conn, former, args.slices, args.repeats, epoch)
            out["slices"]["audience, former statement"] = runs
            out["explain"]["audience, former statement"] = explain
        out["slices"]["audience"] = plan_slices(
            tasks["golden"][0], args.slices, args.repeats, epoch
        )
        out["explain"]["audience"] = explain_slice(tasks["golden"][0], args.slices, 5, epoch)
        for kind, text in out["explain"].items():
            print(f"  EXPLAIN {kind}:\n{text}")
        save()

        # 10 % of the users leave the audience behind the signals' back.
        gone = int(users * args.churn)
        sample = RawSQL("SELECT id FROM auth_user ORDER BY md5(id::text) LIMIT %s", [gone])
        began = time.perf_counter()
        changed = User.objects.filter(id__in=sample).update(is_active=False)
        out["churn"] = {"users": changed, "update_s": round(time.perf_counter() - began, 2)}
        out["reconcile"] = []
        for group in tasks.values():
            for task in group[: args.reconcile_tasks]:
                cost, done = measured(lambda task=task: audience_sync(task=task))
                row = {
                    "task": task.name,
                    "left": done.left,
                    "cancelled": done.jobs_cancelled,
                    **cost,
                }
                out["reconcile"].append(row)
                print(f"  reconcile {row}")
                save()
        out["evenness_after"] = [
            {"strategy": s, "of": "sum of 3", **evenness(conn, [t.id for t in group])}
            for s, group in tasks.items()
        ]
        sizes = conn.execute(
            "SELECT pg_size_pretty(pg_total_relation_size('tasksapp_audiencemember')),"
            " pg_size_pretty(pg_total_relation_size('tasksapp_member'))"
        ).fetchone()
        out["sizes"] = {"audience_member": sizes[0], "member": sizes[1]}
        connection.close()
        connections.close_all()
    return out


COSTS = ["wall (s)", "DB CPU (s)", "largest statements (s)"]


def largest(run: dict) -> str:
    ranked = sorted(run.get("statements", {}).items(), key=lambda item: -item[1])[:3]
    return ", ".join(f"`{name}` {seconds:.1f}" for name, seconds in ranked)


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def render(data: dict) -> str:
    parts = []
    for size in data["sizes"]:
        n = f"{size['users']:,}"
        even = {(r["strategy"], r["of"]): r for r in size["evenness"]}
        after = {r["strategy"]: r for r in size["evenness_after"]}
        rows = []
        for of in ["golden-0", "golden-1", "golden-2", "sum of 3"]:
            key = of.replace("golden", "{}")
            g = even[("golden", of)]
            r = even.get(("random", key.format("random")))
            rows.append(
                {
                    "of": of.replace("golden-", "task "),
                    "jobs": f"{g['jobs']:,}",
                    "mean/s": g["mean_per_s"],
                    "golden peak/s": g["peak_per_s"],
                    "golden peak/mean": f"{g['peak_mean']:.3f}",
                    "random peak/s": r["peak_per_s"] if r else "not run",
                    "random peak/mean": f"{r['peak_mean']:.3f}" if r else "not run",
                }
            )
        g, r = after["golden"], after.get("random")
        rows.append(
            {
                "of": f"sum of 3 after {size['churn']['users']:,} left",
                "jobs": f"{g['jobs']:,}",
                "mean/s": g["mean_per_s"],
                "golden peak/s": g["peak_per_s"],
                "golden peak/mean": f"{g['peak_mean']:.3f}",
                "random peak/s": r["peak_per_s"] if r else "not run",
                "random peak/mean": f"{r['peak_mean']:.3f}" if r else "not run",
            }
        )
        cols = ["of", "jobs", "mean/s", "golden peak/s", "golden peak/mean"]
        cols += ["random peak/s", "random peak/mean"]
        parts.append(f"Evenness, {n} users:\n\n" + table(rows, cols))
        sync = [
            {
                "task": s["task"],
                "members joined": f"{s['joined']:,}",
                "wall (s)": s["wall_s"],
                "DB CPU (s)": s["db_cpu_s"],
                "largest statements (s)": largest(s),
            }
            for s in size["sync"]
        ]
        parts.append(
            f"First `audience_sync` of each task, {n} users:\n\n"
            + table(sync, ["task", "members joined", *COSTS])
        )
        rec = [
            {
                "task": s["task"],
                "members left": f"{s['left']:,}",
                "jobs cancelled": f"{s['cancelled']:,}",
                "wall (s)": s["wall_s"],
                "DB CPU (s)": s["db_cpu_s"],
                "largest statements (s)": largest(s),
            }
            for s in size["reconcile"]
        ]
        parts.append(
            f"Reconcile after `QuerySet.update(is_active=False)` of {size['churn']['users']:,}"
            f" users ({size['churn']['update_s']} s), {n} users:\n\n"
            + table(rec, ["task", "members left", "jobs cancelled", *COSTS])
        )
        sl = [
            {
                "task": kind,
                "jobs per slice": f"{median(runs, 'jobs'):,.0f}",
                "median wall (s)": median(runs, "wall_s"),
                "median DB CPU (s)": median(runs, "db_cpu_s"),
                "runs wall (s)": ", ".join(f"{r['wall_s']:.2f}" for r in runs),
            }
            for kind, runs in size["slices"].items()
        ]
        parts.append(
            f"One slice (1/{data['slices']} of the day) through `slice_plan`, {n} users:\n\n"
            + table(
                sl,
                ["task", "jobs per slice", "median wall (s)", "median DB CPU (s)", "runs wall (s)"],
            )  # fmt: skip
        )
    return "\n\n".join(parts)


def main() -> None:
    args = parse()
    server = start_private(args) if args.private_postgres else None
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")
    base = server.url.rsplit("/", 1)[0] if server else ""
    os.environ["DATABASE_URL"] = f"{base or 'postgres://postgres@127.0.0.1:5432'}/postgres"
    import django

    django.setup()
    sizes: list[dict] = []

    def save() -> dict:
        data = {
            "machine": machine(),
            "postgres": postgres_version(),
            "load_average": os.getloadavg(),
            "slices": args.slices,
            "command": " ".join(["python -m bench.planning.audience", *sys.argv[1:]]),
            "server": "private, nice -n 19" if server else "shared",
            "pg_settings": dict(s.split("=", 1) for s in args.pg_setting),
            "sizes": sizes,
        }
        write_json(args.name, data)
        return data

    try:
        for users in args.users:
            sizes.append({})
            run_size(users, args, sizes[-1], save, server=base)
            print(render(save()))
            print(f"results: bench/results/{args.name}.json")
    finally:
        if server:
            server.stop()


def start_private(args):
    """A PostgreSQL server of the bench's own, niced (its backends with it)."""
    from tests.processes.support import PrivatePostgres

    settings = dict(s.split("=", 1) for s in args.pg_setting)
    server = PrivatePostgres(nice=19, settings=settings).start()
    print(f"private PostgreSQL (nice 19) at {server.url}, {settings}")
    return server


if __name__ == "__main__":
    main()
