"""Claims while retention rebuilds the jobs table's bloated indexes (REINDEX INDEX
CONCURRENTLY, `tasksapp/retention/indexes.py`).

`days` days of `rows_per_day` finished jobs (1 % dead), then every succeeded job of all
but the last day removed, as 7 days for succeeded and 30 for dead jobs leave them: the
dead jobs keep their pages, the indexes stay at their size for a fraction of the rows.
Then the product's `index_rebuild_bloated` with the default settings, while the claim
probe of `partitions.py` claims (and hands back) a due job of the same table every 10 ms;
and 3 s of the probe at rest before it. Measured: the rebuild's time and WAL, the indexes'
size before and after, claim latency at rest and during.

    python -m bench.growth.reindex      (BENCH_ROWS_PER_DAY, BENCH_DAYS)
"""

from __future__ import annotations

import datetime as dt
import os

from bench.common import BenchDatabase, django_on, write_json
from bench.growth.partitions import FILL, PROBE_INSERT, measured

SPREAD = """
UPDATE tasksapp_job SET state = 'dead', attempts = 3
WHERE id % 100 = 0
"""
THIN = """
DELETE FROM tasksapp_job WHERE state = 'succeeded' AND finished_at < %(before)s
"""
SIZES = "SELECT pg_table_size('tasksapp_job'), pg_indexes_size('tasksapp_job')"


def run(*, db_prefix: str, rows_per_day: int, days: int) -> dict:
    with BenchDatabase(f"{db_prefix}_reindex") as db, db.connect() as conn:
        django_on(db.url)
        from tasksapp.retention.indexes import index_rebuild_bloated
        from tasksapp.retention.settings import retention_settings

        today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        first = today - dt.timedelta(days=days + 7)
        for day in range(days):
            params = {"day": day, "rows": rows_per_day, "start": first + dt.timedelta(days=day)}
            conn.execute(FILL.format(table="tasksapp_job"), params)
        conn.execute(SPREAD)
        conn.execute(THIN, {"before": first + dt.timedelta(days=days - 1)})
        probe = conn.execute(
            PROBE_INSERT.format(table="tasksapp_job"), {"n": "reindex", "id": 2**40}
        ).fetchone()[0]
        conn.execute("VACUUM ANALYZE tasksapp_job")
        rows = conn.execute("SELECT count(*) FROM tasksapp_job").fetchone()[0]
        table_before, indexes_before = conn.execute(SIZES).fetchone()
        rebuilt: list[str] = []

        def rebuild() -> int:
            rebuilt.extend(index_rebuild_bloated(cfg=retention_settings()))
            return len(rebuilt)

        result = measured(conn, db.url, "tasksapp_job", probe, rebuild)
        indexes_after = conn.execute(SIZES).fetchone()[1]
        result.update(
            rows_per_day=rows_per_day,
            days=days,
            rows_kept=rows,
            table_mb=table_before / 2**20,
            indexes_mb_before=indexes_before / 2**20,
            indexes_mb_after=indexes_after / 2**20,
            rebuilt=rebuilt,
        )
        print(f"  rebuild: {result}", flush=True)
        return result


if __name__ == "__main__":
    result = run(
        db_prefix=os.environ.get("BENCH_DB_PREFIX", "tempo_bench_growth"),
        rows_per_day=int(os.environ.get("BENCH_ROWS_PER_DAY", "100000")),
        days=int(os.environ.get("BENCH_DAYS", "8")),
    )
    print(write_json("growth-reindex", {"command": "python -m bench.growth.reindex", **result}))
