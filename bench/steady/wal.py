"""Where a window's WAL went: bytes by relation (the first block a record touches) and
kind of record (resource manager and type), read with pg_walinspect between the
window's two LSNs. A record that touches no relation's block (a commit, a
running-transactions snapshot) counts under its resource manager."""

from __future__ import annotations

import time

import psycopg

from bench.capacity.measure import BENCH_TAG

RECORDS = f"""{BENCH_TAG}
SELECT coalesce(c.relname, '(' || lower(r.resource_manager) || ')') AS relation,
       r.resource_manager || ' ' || split_part(r.record_type, ' ', 1) AS kind,
       sum(r.record_length)::bigint AS bytes,
       sum(r.fpi_length)::bigint AS fpi_bytes,
       count(*) AS records
FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) r
LEFT JOIN LATERAL (
    SELECT substring(r.block_ref FROM 'rel \\d+/\\d+/(\\d+)')::oid AS filenode
) b ON true
LEFT JOIN pg_class c ON c.relfilenode = b.filenode AND c.relfilenode <> 0
GROUP BY 1, 2 ORDER BY 3 DESC
"""
FLUSHED = f"{BENCH_TAG} SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn"
FLUSH_WAIT_SECONDS = 5  # the WAL writer flushes asynchronous commits within 200 ms


def by_relation(conn: psycopg.Connection, start_lsn: str, end_lsn: str, jobs: int) -> list:
    """Per relation and kind of record, largest first: bytes a job, of them full-page
    images, records a job."""
    conn.execute(f"{BENCH_TAG} CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    if conn.execute(
        f"{BENCH_TAG} SELECT %s::pg_lsn >= %s::pg_lsn", (start_lsn, end_lsn)
    ).fetchone()[0]:
        return []  # nothing written in the window (a side that keeps no database)
    wait_until_flushed(conn, end_lsn)
    rows = conn.execute(RECORDS, (start_lsn, end_lsn)).fetchall()
    per = max(jobs, 1)
    return [
        {
            "relation": relation,
            "record": kind,
            "B/job": round(size / per),
            "of it full pages": round(fpi / per),
            "records/job": round(records / per, 2),
        }
        for relation, kind, size, fpi, records in rows
    ]


def wait_until_flushed(conn: psycopg.Connection, lsn: str) -> None:
    """pg_walinspect reads only flushed WAL; the window may end on records an
    asynchronous commit wrote but the WAL writer has not flushed yet."""
    deadline = time.monotonic() + FLUSH_WAIT_SECONDS
    while not conn.execute(FLUSHED, (lsn,)).fetchone()[0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"WAL up to {lsn} not flushed in {FLUSH_WAIT_SECONDS} s")
        time.sleep(0.05)
