"""A recurring task with its own, longer retention: what a retention statement reads.

`days` days of a large task's jobs (`rows_per_day`, kept 30 days by its own ages) and of a
small one's (a 50th of that, kept the default 7 days), all succeeded, the oldest
`days` days ago. One retention run removes the small task's old jobs. Then, with nothing
left to remove, the statement that looks for the small task's removable jobs is run
under EXPLAIN (ANALYZE, BUFFERS) in both shapes:

- by group (the product's `DELETE_FINISHED`'s selection): a range of `job_retention_idx`
  for one handler, task and state;
- by age (its shape before groups): oldest first along `job_finished_at_idx`, skipping
  the jobs of tasks with their own ages — which reads every job the large task keeps past
  the default age, at every statement of every run.

    python -m bench.growth.overrides      (BENCH_ROWS_PER_DAY, BENCH_DAYS)
"""

from __future__ import annotations

import datetime as dt
import os
import time

from bench.common import BenchDatabase, django_on, write_json

HANDLER = "tasksapp.recurring.handlers.sync_member"
FILL = """
INSERT INTO tasksapp_job (handler, payload, run_at, created_at, claimed_at, started_at,
    finished_at, state, attempts, max_attempts, retry_policy, delivery, idempotency_key,
    lease_token, claimed_by, last_error, errors)
SELECT %(handler)s,
    jsonb_build_object('member_id', i, 'recurring_task_id', %(task)s, 'occurrence', %(day)s),
    t, t - interval '1 day', t - interval '40 ms', t + interval '3 ms', t + interval '80 ms',
    'succeeded', 1, 3, '{}', 'transactional',
    'plan:' || %(task)s || ':' || %(day)s || ':' || i, 1, 'sim', '', '[]'
FROM generate_series(0, %(rows)s - 1) AS i,
     LATERAL (SELECT %(start)s::timestamptz + i * (interval '1 day' / %(rows)s)) AS at(t)
"""
BY_GROUP = """
SELECT c.id FROM tasksapp_job c
WHERE c.handler = %(handler)s AND COALESCE(c.payload ->> 'recurring_task_id', '') = %(task)s
  AND c.state = 'succeeded' AND c.finished_at IS NOT NULL AND c.finished_at < %(before)s
ORDER BY c.finished_at LIMIT 1000
"""
BY_AGE = """
SELECT c.id FROM tasksapp_job c
WHERE c.finished_at < %(before)s AND c.state = 'succeeded'
  AND NOT COALESCE(c.payload ->> 'recurring_task_id', '') = ANY(%(overridden)s)
ORDER BY c.finished_at LIMIT 1000
"""


def explain(conn, statement: str, params: dict) -> dict:
    plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", params).fetchone()[
        0
    ][0]
    top = plan["Plan"]
    return {
        "ms": plan["Execution Time"],
        "buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
        "index": _index_of(top),
        "rows": top["Actual Rows"],
    }


def _index_of(node: dict) -> str | None:
    if "Index Name" in node:
        return node["Index Name"]
    for child in node.get("Plans", []):
        found = _index_of(child)
        if found:
            return found
    return None


def run(*, db_prefix: str, rows_per_day: int, days: int) -> dict:
    with BenchDatabase(f"{db_prefix}_overrides") as db, db.connect() as conn:
        django_on(db.url)
        from tasksapp.recurring.models import RecurringTask
        from tasksapp.retention.services import retention_run

        now = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        large, small = (
            RecurringTask.objects.create(
                name=name, handler=HANDLER, epoch=now, period=dt.timedelta(days=1),
                retention=ages,
            )
            for name, ages in (("large", {"succeeded": 30}), ("small", {}))
        )  # fmt: skip
        for day in range(days):
            start = now - dt.timedelta(days=days - day)
            for task, rows in ((large, rows_per_day), (small, rows_per_day // 50)):
                params = {"handler": HANDLER, "task": task.id, "day": day, "rows": rows}
                conn.execute(FILL, {**params, "start": start})
        conn.execute("VACUUM ANALYZE tasksapp_job")
        began = time.perf_counter()
        report = retention_run(now=now)
        run_s = time.perf_counter() - began
        conn.execute("VACUUM ANALYZE tasksapp_job")
        before = now - dt.timedelta(days=7)
        kept_old = conn.execute(
            "SELECT count(*) FROM tasksapp_job WHERE finished_at < %(before)s", {"before": before}
        ).fetchone()[0]
        result = {
            "rows_per_day": rows_per_day,
            "days": days,
            "rows": conn.execute("SELECT count(*) FROM tasksapp_job").fetchone()[0],
            "removed": report.removed.get("jobs", 0),
            "run_s": run_s,
            "kept_past_default_age": kept_old,
        }
        params = {"handler": HANDLER, "task": str(small.id), "before": before}
        for _ in range(2):  # the first of each warms the cache
            result["by_group"] = explain(conn, BY_GROUP, params)
            result["by_age"] = explain(conn, BY_AGE, {**params, "overridden": [str(large.id)]})
        print(f"  overrides: {result}", flush=True)
        return result


if __name__ == "__main__":
    result = run(
        db_prefix=os.environ.get("BENCH_DB_PREFIX", "tempo_bench_growth"),
        rows_per_day=int(os.environ.get("BENCH_ROWS_PER_DAY", "100000")),
        days=int(os.environ.get("BENCH_DAYS", "20")),
    )
    print(write_json("growth-overrides", {"command": "python -m bench.growth.overrides", **result}))
