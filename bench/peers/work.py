"""The exercise's work for the peers' workers (JobsRepo.ProcessLockedJob): wait 83 ms,
then record ExecuteAt with the database clock, one row per execution, outside any
scheduler's transaction (a job executed twice shows two rows). Each worker thread keeps
one connection to the run's database (PEERS_DATABASE_URL)."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time

import psycopg

WORK_SECONDS = 0.083

SCHEMA = """
CREATE TABLE IF NOT EXISTS peer_job (
    id bigint PRIMARY KEY,
    run_at timestamptz NOT NULL,
    create_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS peer_execution (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    began_at timestamptz NOT NULL,
    executed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""
RECORD = "INSERT INTO peer_execution (job_id, began_at) VALUES (%s, %s)"

_local = threading.local()


def execute(job_id: int) -> None:
    began = dt.datetime.now(dt.UTC)
    time.sleep(WORK_SECONDS)
    _connection().execute(RECORD, [job_id, began])


def _connection() -> psycopg.Connection:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(os.environ["PEERS_DATABASE_URL"], autocommit=True)
    return conn
