"""The exercise's naive demo scheduler (SubWorker.AndrewDemo), for a side-by-side baseline.

Loop: list the due jobs; for each, try to lock it and, if locked, process it (83 ms);
when nothing was due, sleep 10 s. Every action is logged like the exercise's JobsRepo.

    python -m bench.practice.naive DATABASE_URL CLIENT
"""

from __future__ import annotations

import signal
import sys
import time

import psycopg

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id bigserial PRIMARY KEY,
    run_at timestamptz NOT NULL,
    create_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    execute_at timestamptz,
    state int NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_run_at_state ON jobs (run_at, state);
CREATE TABLE IF NOT EXISTS worker_logs (
    sn bigserial PRIMARY KEY,
    job_id bigint,
    action text NOT NULL,
    client text NOT NULL,
    execute_count int NOT NULL DEFAULT 0
);
"""

stopping = False


def _stop(signum, frame) -> None:
    global stopping
    stopping = True


def log(conn, action: str, client: str, job_id: int | None = None) -> None:
    conn.execute(
        "INSERT INTO worker_logs (job_id, action, client) VALUES (%s, %s, %s)",
        [job_id, action, client],
    )


def run(url: str, client: str) -> None:
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    with psycopg.connect(url, autocommit=True) as conn:
        while not stopping:
            due = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM jobs WHERE state = 0 AND run_at < clock_timestamp()"
                    " ORDER BY run_at"
                ).fetchall()
            ]
            log(conn, "QUERYLIST", client)
            for job_id in due:
                if stopping:
                    return
                locked = (
                    conn.execute(
                        "UPDATE jobs SET state = 1 WHERE id = %s AND state = 0", [job_id]
                    ).rowcount
                    == 1
                )
                log(conn, "ACQUIRE_SUCCESS" if locked else "ACQUIRE_FAILURE", client, job_id)
                if locked:
                    time.sleep(0.083)
                    conn.execute(
                        "UPDATE jobs SET state = 2, execute_at = clock_timestamp()"
                        " WHERE id = %s AND state = 1",
                        [job_id],
                    )
                    log(conn, "COMPLETE", client, job_id)
            if not due:
                for _ in range(100):  # sleep 10 s, but stop promptly on a signal
                    if stopping:
                        return
                    time.sleep(0.1)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
