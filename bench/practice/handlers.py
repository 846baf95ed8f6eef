"""The work of a practice job, as in the exercise's JobsRepo.ProcessLockedJob: wait
83 ms, then record the execution time (the exercise's ExecuteAt) with the database
clock. One row per execution, outside the job's transaction, so a job executed twice
would show two rows. The moment the handler began (this process's clock, the same
machine's) is kept beside it, to tell the engine's overhead from the work's own."""

import datetime as dt
import time

from django.db import connection

from tasksapp.engine.handlers import job_handler

WORK_SECONDS = 0.083

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
    time.sleep(WORK_SECONDS)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO practice_execution (job_id, began_at) VALUES (%s, %s)",
            [ctx.job_id, began],
        )
