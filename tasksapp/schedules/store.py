"""The runs table's bulk insert: on PostgreSQL one `INSERT … SELECT FROM unnest(…)`
(a statement's cost, not a model per row), elsewhere the ORM's bulk_create. A run whose
(schedule, fire time) is recorded already is left as it is."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from tasksapp.engine.db import on_postgres, tempo_connection

INSERT_RUNS = """
INSERT INTO tasksapp_schedulerun (schedule_id, fire_at, run_at, job_id, outcome, details,
                                  decided_at)
SELECT r.schedule_id, r.fire_at, r.run_at, r.job_id, r.outcome, r.details::jsonb, now()
  FROM unnest(%(schedules)s::bigint[], %(fires)s::timestamptz[], %(run_ats)s::timestamptz[],
              %(jobs)s::bigint[], %(outcomes)s::text[], %(details)s::text[])
       AS r(schedule_id, fire_at, run_at, job_id, outcome, details)
ON CONFLICT (schedule_id, fire_at) DO NOTHING
"""


UPDATE_PLANNED = """
UPDATE tasksapp_schedule AS s
   SET planned_until = p.planned_until, next_fire_at = p.next_fire_at
  FROM unnest(%(ids)s::bigint[], %(planned)s::timestamptz[], %(next)s::timestamptz[])
       AS p(id, planned_until, next_fire_at)
 WHERE s.id = p.id
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
    if not on_postgres():
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
    with tempo_connection().cursor() as cursor:
        cursor.execute(INSERT_RUNS, params)


def update_planned(rows: list[tuple[int, dt.datetime, dt.datetime | None]]) -> None:
    """Each (schedule id, planned_until, next_fire_at) written: one statement on
    PostgreSQL, one per distinct pair elsewhere."""
    if not rows:
        return
    if not on_postgres():
        from tasksapp.schedules.models import Schedule

        groups: dict[tuple, list[int]] = {}
        for schedule_id, planned, upcoming in rows:
            groups.setdefault((planned, upcoming), []).append(schedule_id)
        for (planned, upcoming), ids in groups.items():
            Schedule.objects.filter(id__in=ids).update(planned_until=planned, next_fire_at=upcoming)
        return
    params = {
        "ids": [row[0] for row in rows],
        "planned": [row[1] for row in rows],
        "next": [row[2] for row in rows],
    }
    with tempo_connection().cursor() as cursor:
        cursor.execute(UPDATE_PLANNED, params)
