"""The work of a practice job, as in the exercise's JobsRepo.ProcessLockedJob: wait
83 ms, then record the execution time (the exercise's ExecuteAt) with the database
clock. One row per execution, outside the job's transaction, so a job executed twice
would show two rows. The moment the handler began (this process's clock, the same
machine's) is kept beside it, to tell the engine's overhead from the work's own.

While the work runs, a marker file `<pid>.<job id>` sits in the folder named by
PRACTICE_INFLIGHT_DIR (when set), so the bench can kill a worker that has work in flight."""

import contextlib
import datetime as dt
import os
import time
from pathlib import Path

from django.db import connection

from tasksapp.engine.handlers import job_handler

WORK_SECONDS = 0.083
INFLIGHT_DIR = "PRACTICE_INFLIGHT_DIR"

EXECUTIONS_TABLE = """
CREATE TABLE IF NOT EXISTS practice_execution (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    began_at timestamptz NOT NULL,
    executed_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


@job_handler
def process_locked_job(ctx):
    began = dt.datetime.now(dt.UTC)
    with _in_flight(ctx.job_id):
        time.sleep(WORK_SECONDS)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO practice_execution (job_id, began_at) VALUES (%s, %s)",
                [ctx.job_id, began],
            )


@contextlib.contextmanager
def _in_flight(job_id: int):
    folder = os.environ.get(INFLIGHT_DIR)
    if not folder:
        yield
        return
    marker = Path(folder) / f"{os.getpid()}.{job_id}"
    marker.touch()
    try:
        yield
    finally:
        marker.unlink(missing_ok=True)
