"""Named, hand-written statements of a task's hot path: read the run, lock the graph,
record a success, release the dependants. Each ORM query there cost 4-7 times the CPU of
the statement itself, and every task of every graph pays them.

The statements run on PostgreSQL and on SQLite (the embedded mode): ``{jsonb}`` casts JSON
text on PostgreSQL, ``{for_update}`` locks the row there (SQLite serialises writers by
itself). JSON columns are read as text on both (Django loads jsonb as text).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from tasksapp.engine.db import on_postgres, tempo_connection

GRAPH_TABLE = "tasksapp_graphrun"
TASK_TABLE = "tasksapp_taskrun"

RUN_READ = f"""
SELECT r.task, r.state, r.job_id, r.attempts, r.rescued, r.errors,
       g.id, g.state, g.strategy, g.has, g.generation, g.started_at,
       g.task_retry_policy, g.max_task_attempts
FROM {TASK_TABLE} r JOIN {GRAPH_TABLE} g ON g.id = r.graph_run_id
WHERE r.id = %s
"""

RESULTS = f"SELECT task, result FROM {TASK_TABLE} WHERE graph_run_id = %s AND task IN ({{names}})"

GRAPH_LOCK = f"""
SELECT state, has, "values", generation, started_at FROM {GRAPH_TABLE} WHERE id = %s {{for_update}}
"""

TASK_ROWS = f"""
SELECT id, task, state, job_id, done_order, attempts FROM {TASK_TABLE} WHERE graph_run_id = %s
"""

TASK_SUCCEED = f"""
UPDATE {TASK_TABLE}
SET state = 'succeeded', attempts = attempts + 1, inputs = %s{{jsonb}}, result = %s{{jsonb}},
    error = '', done_order = %s, started_at = %s, finished_at = %s
WHERE id = %s AND state = 'ready'
"""

GRAPH_VALUES = f'UPDATE {GRAPH_TABLE} SET "values" = %s{{jsonb}} WHERE id = %s'

TASKS_RELEASE = f"""
UPDATE {TASK_TABLE}
SET state = 'ready', released_at = %s, job_id = CASE id {{cases}} END
WHERE id IN ({{ids}}) AND state = 'waiting'
"""


@cache
def _vendor_parts(postgres: bool) -> dict[str, str]:
    return {"jsonb": "::jsonb" if postgres else "", "for_update": "FOR UPDATE" if postgres else ""}


def statement(template: str, **parts: str) -> str:
    return template.format(**_vendor_parts(on_postgres()), **parts)


def placeholders(count: int) -> str:
    return ", ".join(["%s"] * count)


def dumps(value: Any) -> str:
    return json.dumps(value)


def loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def moment(value):
    """A datetime as the database takes it (naive UTC text on SQLite)."""
    return tempo_connection().ops.adapt_datetimefield_value(value)


def fetch_one(sql: str, params: Sequence[Any]) -> tuple | None:
    with tempo_connection().cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def fetch_all(sql: str, params: Sequence[Any]) -> list[tuple]:
    with tempo_connection().cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def execute(sql: str, params: Sequence[Any]) -> int:
    with tempo_connection().cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
