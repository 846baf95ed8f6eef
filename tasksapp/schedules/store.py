"""The runs table's bulk insert: on PostgreSQL one `INSERT … SELECT FROM unnest(…)`
(a statement's cost, not a model per row), elsewhere the ORM's bulk_create. A run whose
(schedule, fire time) is recorded already is left as it is."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

INSERT_RUNS = """
INSERT INTO tasksapp_schedulerun (schedule_id, fire_at, run_at, job_id, outcome, details,
                                  decided_at)
SELECT r.schedule_id, r.fire_at, r.run_at, r.job_id, r.outcome, r.details::jsonb, now()
  FROM unnest(%(schedules)s::bigint[], %(fires)s::timestamptz[], %(run_ats)s::timestamptz[],
              %(jobs)s::bigint[], %(outcomes)s::text[], %(details)s::text[])
       AS r(schedule_id, fire_at, run_at, job_id, outcome, details)
ON CONFLICT (schedule_id, fire_at) DO NOTHING
"""


@dataclass
class NewRun:
    schedule_id: int
    fire_at: dt.datetime
    run_at: dt.datetime | None
    outcome: str
    details: dict[str, Any] = field(default_factory=dict)
    job_id: int | None = None


def insert_runs(runs: list[NewRun]) -> None:
    if not runs:
        return
    if connection.vendor != "postgresql":
        from tasksapp.schedules.models import ScheduleRun

        ScheduleRun.objects.bulk_create(
            [ScheduleRun(**vars(run)) for run in runs], ignore_conflicts=True
        )
        return
    params = {
        "schedules": [run.schedule_id for run in runs],
        "fires": [run.fire_at for run in runs],
        "run_ats": [run.run_at for run in runs],
        "jobs": [run.job_id for run in runs],
        "outcomes": [run.outcome for run in runs],
        "details": [json.dumps(run.details) for run in runs],
    }
    with connection.cursor() as cursor:
        cursor.execute(INSERT_RUNS, params)
