"""Hot path: what the trigram indexes cost a job's insert, claim, start and success, in
WAL bytes and time, by the kind of partial index.

    python -m bench.search.hotpath [--jobs 20000] [--batch 250]
        [--variants search-rows none full not-in-flight not-in-flight-nor-scheduled
                    not-in-flight-fastupdate-off]

Each variant runs on a fresh database of a PostgreSQL server of the bench's own (no other
session writes WAL there; `fsync=off`), migrated. `search-rows` is the schema as
migrated (migration 0028: the key's and the payload's trigram indexes on search rows
written once, at the insert; the last error's on the jobs table). Every other variant
drops the search rows and their triggers and puts the key's and the payload's indexes
back on the jobs table, as migration 0023 had them, with the variant's condition:
`none`; `full` (every job); `not-in-flight` (0023's: claimed and running jobs left out);
`not-in-flight-nor-scheduled`; `not-in-flight-fastupdate-off` (0023's without GIN's
pending list: every entry written into the index at once).
N jobs with payloads of 300-400 characters (bench/search/data.py) are inserted due now by
one set-based statement, then claimed, started and succeeded by the engine's own
statements (tasksapp.engine.store.postgres_sql: CLAIM_DUE, START_CLAIMED,
SUCCEED_RUNNING) in batches of `--batch` ids, as a dispatcher and a worker send them.
Before each phase a CHECKPOINT, so that each pays for the first change of every page it
touches (full-page images) alike. Per phase: WAL bytes per job, ms per job, and the
updates that were HOT.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import uuid

import psycopg

from bench.capacity import measure
from bench.common import django_on, table, write_json
from bench.search.data import KEY, PAYLOAD
from tests.processes.support import migrate

MIGRATION = importlib.import_module("tasksapp.migrations.0023_job_text_search")
SEARCH_ROWS = importlib.import_module("tasksapp.migrations.0028_job_search_rows")
NOT_SCHEDULED = "WHERE NOT (state IN ('claimed', 'running', 'scheduled'))"
# The variants: the indexes' storage parameters and condition (None: no index).
WHERE = {
    "search-rows": "as migrated",
    "none": None,
    "full": "",
    "not-in-flight": MIGRATION.NOT_IN_FLIGHT,
    "not-in-flight-nor-scheduled": NOT_SCHEDULED,
    "not-in-flight-fastupdate-off": f"WITH (fastupdate = off) {MIGRATION.NOT_IN_FLIGHT}",
}
INSERT = f"""
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT 'tests.handlers.recording.noop', {PAYLOAD}, now() - interval '1 s', 'scheduled', 0,
    5, '{{}}', 'at_least_once', {KEY}, 0, '', '', '[]'
FROM generate_series(1, %(jobs)s) AS i
"""
HOT = "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'tasksapp_job'"


def batches(ids: list, size: int):
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


class Phase:
    def __init__(self, conn: psycopg.Connection, jobs: int) -> None:
        self.conn, self.jobs = conn, jobs

    def __enter__(self) -> Phase:
        self.conn.execute("CHECKPOINT")
        self.lsn = self.conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        self.updates = self._updates()
        self.began = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.ms = (time.perf_counter() - self.began) * 1000
        self.wal = self.conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [self.lsn]
        ).fetchone()[0]
        after = self._updates()
        self.updated = after[0] - self.updates[0]
        self.hot = after[1] - self.updates[1]

    def _updates(self) -> tuple[int, int]:
        self.conn.execute("SELECT pg_stat_force_next_flush()")
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        return self.conn.execute(HOT).fetchone()

    def figures(self) -> dict:
        return {
            "wal_bytes_per_job": round(float(self.wal) / self.jobs),
            "ms_per_job": round(self.ms / self.jobs, 4),
            "hot_updates": f"{self.hot}/{self.updated}",
        }


def on_the_jobs_table(conn: psycopg.Connection, where: str | None) -> None:
    """The key's and the payload's trigram indexes back on the jobs table with the
    condition `where` (None: none), without search rows."""
    for trigger in SEARCH_ROWS.TRIGGER_NAMES:
        conn.execute(f"DROP TRIGGER {trigger} ON tasksapp_job")
    conn.execute("DROP TABLE tasksapp_job_search")
    if where is not None:
        for name, column in SEARCH_ROWS.OLD_INDEXES.items():
            conn.execute(f"CREATE INDEX {name} ON tasksapp_job USING gin ({column}) {where}")


def run_variant(url: str, variant: str, jobs: int, batch: int) -> dict:
    from tasksapp.engine.store import postgres_sql as sql

    with psycopg.connect(url, autocommit=True) as conn:
        if variant != "search-rows":
            on_the_jobs_table(conn, WHERE[variant])
        phases = {}
        with Phase(conn, jobs) as phases["insert"]:
            conn.execute(INSERT, {"jobs": jobs})
        ids = [row[0] for row in conn.execute("SELECT id FROM tasksapp_job ORDER BY id")]
        claimed = []
        with Phase(conn, jobs) as phases["claim"]:
            for chunk in batches(ids, batch):
                params = {"ids": chunk, "owner": "d1", "ttl": 600, "lead": 0.04}
                claimed += conn.execute(sql.CLAIM_DUE, params).fetchall()
        leases = [(row[0], row[1]) for row in claimed]
        with Phase(conn, jobs) as phases["start"]:
            for chunk in batches(leases, batch):
                params = {**sql.fenced_params(chunk), "worker": "w1", "ttl": 600, "lead": 1}
                conn.execute(sql.START_CLAIMED, params)
        with Phase(conn, jobs) as phases["success"]:
            for chunk in batches(leases, batch):
                outcomes = [(job_id, token, None, None) for job_id, token in chunk]
                conn.execute(sql.SUCCEED_RUNNING, sql.outcome_params(outcomes, "w1"))
        done = conn.execute("SELECT count(*) FROM tasksapp_job WHERE state = 'succeeded'")
        trigram = conn.execute(
            "SELECT coalesce(sum(pg_relation_size(c.oid)), 0) FROM pg_class c "
            "WHERE c.relname = ANY(%s)",
            [list(MIGRATION.INDEXES) + list(SEARCH_ROWS.NEW_INDEXES)],
        ).fetchone()[0]
        return {
            "variant": variant,
            "jobs": jobs,
            "succeeded": done.fetchone()[0],
            "trigram_index_bytes_per_job": round(float(trigram) / jobs),
            **{phase: p.figures() for phase, p in phases.items()},
        }


def row(result: dict) -> dict:
    phases = ("insert", "claim", "start", "success")
    wal = [result[p]["wal_bytes_per_job"] for p in phases]
    return {
        "indexes": result["variant"],
        "WAL B/job insert+claim+start+success": "+".join(map(str, wal)) + f" = {sum(wal)}",
        "ms/job insert+claim+start+success": "+".join(
            f"{result[p]['ms_per_job']:.3f}" for p in phases
        ),
        "HOT claim / start / success": " · ".join(
            result[p]["hot_updates"] for p in ("claim", "start", "success")
        ),
        "trigram index B/job": result["trigram_index_bytes_per_job"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--variants", nargs="+", choices=list(WHERE), default=list(WHERE))
    args = parser.parse_args()
    server = measure.StatementsPostgres().start()
    django_on(server.url)  # the engine's statements are built from the models' constants
    results = []
    try:
        base = server.url.rsplit("/", 1)[0]
        for variant in args.variants:
            name = f"hotpath_{uuid.uuid4().hex[:6]}"
            with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
            migrate(f"{base}/{name}")
            results.append(run_variant(f"{base}/{name}", variant, args.jobs, args.batch))
            print(table([row(results[-1])], list(row(results[-1]))), file=sys.stderr)
    finally:
        server.stop()
    rows = [row(r) for r in results]
    print(f"\n{args.jobs:,} jobs, batches of {args.batch}\n")
    print(table(rows, list(rows[0])))
    path = write_json("search-hotpath", {"args": vars(args), "results": results})
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
