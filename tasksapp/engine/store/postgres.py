"""The job store on PostgreSQL: named, hand-written statements run with the database clock.

Every statement that changes `state` is a conditional UPDATE guarded on the expected
state and, after a claim, on the fencing token (`lease_token`). The partial indexes that
serve them are declared on the Job model (job_due_idx, job_lease_idx). Output columns are
named as the fields of the rows they become (tasksapp.engine.store.rows).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from functools import cache
from typing import Any, TypeVar

from django.db import connection
from psycopg.rows import RowFactory, no_result

from tasksapp.engine.models import Delivery, JobState
from tasksapp.engine.models.jobs import DUE_STATES, LEASED_STATES
from tasksapp.engine.sql import JOB_TABLE

from . import pg_session
from .base import LEASE_EXPIRED_KIND
from .pg_session import engine_cursor
from .rows import (
    Claim,
    DatabaseTime,
    DueJob,
    FailedAttempt,
    InsertedJob,
    MemberSlice,
    NewJob,
    PlannedSlice,
    PollWindow,
    Reaped,
    StartedJob,
)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# State and delivery names as SQL literals, from the model's constants.
SCHEDULED, CLAIMED, RUNNING, SUCCEEDED, FAILED, DEAD, LOST = (
    _literal(state)
    for state in (
        JobState.SCHEDULED,
        JobState.CLAIMED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.DEAD,
        JobState.LOST,
    )
)
DUE = ", ".join(map(_literal, DUE_STATES))  # the predicate of job_due_idx
LEASED = ", ".join(map(_literal, LEASED_STATES))  # the predicate of job_lease_idx
AT_MOST_ONCE = _literal(Delivery.AT_MOST_ONCE)

# One more entry of a job's `errors` (aliased `j`), as the one-element array to append.
ERROR_ENTRY = """jsonb_build_array(jsonb_build_object(
    'attempt', j.attempts, 'at', clock_timestamp(), 'error', %(error)s, 'kind', %(kind)s))"""

CLOCK_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::float8"

OWNED_PARTITIONS = "(%(all_partitions)s OR (id %% %(partitions)s) = ANY(%(owned)s))"

POLL_DUE = f"""
SELECT id, floor(extract(epoch FROM run_at) * 1000)::bigint AS run_at_ms, run_at
FROM {JOB_TABLE}
WHERE state IN ({DUE})
  AND run_at < clock_timestamp() + make_interval(secs => %(lookahead)s)
  AND {OWNED_PARTITIONS}
  AND (%(after_run_at)s::timestamptz IS NULL
       OR (run_at, id) > (%(after_run_at)s::timestamptz, %(after_id)s::bigint))
ORDER BY run_at, id
LIMIT %(limit)s
"""

# The claim returns run_at in ms with its microseconds (a float): the dispatcher orders
# and splits its batches by it. (The worker waits for the run_at its start returns.)
# Joined with unnest, not `id = ANY(array)`: with tens of thousands of ids the latter
# is checked linearly for every row the plan visits (16 s for 50,000 ids, 70 ms joined).
CLAIM_DUE = f"""
UPDATE {JOB_TABLE} j
SET state = {CLAIMED}, lease_token = j.lease_token + 1, claimed_by = %(owner)s,
    claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[]) AS t(id)
WHERE j.id = t.id
  AND j.state IN ({DUE})
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING j.id, j.lease_token AS token,
          (extract(epoch FROM j.run_at) * 1000)::float8 AS run_at_ms
"""

# What a start returns, by StartedJob field: the prepared cursor gives plain tuples, so
# the statement's output list and the reading of its rows both come from this mapping.
# `read_ms` is the database clock, read before the answer left: the worker's lower bound
# of the database time from then on.
STARTED_COLUMNS = {
    "id": "j.id",
    "token": "j.lease_token",
    "handler": "j.handler",
    "payload": "j.payload",
    "attempt": "j.attempts",
    "max_attempts": "j.max_attempts",
    "delivery": "j.delivery",
    "retry_policy": "j.retry_policy",
    "idempotency_key": "j.idempotency_key",
    "run_at": "j.run_at",
    "time_limit": "j.time_limit",
    "read_ms": CLOCK_MS,
}
STARTED_OUTPUT = ",\n          ".join(
    f"{value} AS {name}" for name, value in STARTED_COLUMNS.items()
)

# The worker starts a job as soon as its message arrives, up to `lead` seconds before
# run_at (the dispatcher claims 40 ms ahead), and waits for run_at itself before calling
# the handler (tasksapp.engine.worker.executor).
START_CLAIMED = f"""
UPDATE {JOB_TABLE} j
SET state = {RUNNING}, attempts = j.attempts + 1,
    started_at = greatest(j.run_at, clock_timestamp()),
    claimed_by = %(worker)s,
    lease_expires_at = greatest(j.run_at, clock_timestamp()) + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
WHERE j.id = t.id AND j.lease_token = t.token AND j.state = {CLAIMED}
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING {STARTED_OUTPUT}
"""

# One round trip's reading of the database clock (a worker tightening its bound of it).
DB_CLOCK_MS = f"SELECT {CLOCK_MS} AS read_ms"

# started_at becomes the moment the handler began (the worker's lower bound of the
# database time then, in ms), where the worker sent one.
SUCCEED_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET state = {SUCCEEDED}, finished_at = clock_timestamp(), result = t.result::jsonb,
    started_at = coalesce(to_timestamp(t.began_ms / 1000), j.started_at),
    lease_expires_at = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::text[],
            %(began_ms)s::float8[])
     AS t(id, token, result, began_ms)
WHERE j.id = t.id AND j.lease_token = t.token AND j.state = {RUNNING}
RETURNING j.id
"""

FAIL_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET state = %(state)s,
    run_at = CASE WHEN %(state)s = {FAILED}
                  THEN clock_timestamp() + make_interval(secs => %(delay)s) ELSE run_at END,
    finished_at = clock_timestamp(), last_error = %(error)s, claimed_by = '',
    started_at = coalesce(to_timestamp(%(began_ms)s::float8 / 1000), started_at),
    lease_expires_at = NULL,
    errors = j.errors || {ERROR_ENTRY}
WHERE id = %(id)s AND lease_token = %(token)s AND state = {RUNNING}
RETURNING id
"""

RENEW_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
WHERE j.id = t.id AND j.lease_token = t.token AND j.state = {RUNNING}
"""

# Expired leases in the owned partitions: claimed jobs go back to `scheduled` (their
# message was lost); running jobs are handled per delivery mode. Returns how many were
# reaped and when the next lease in these partitions expires.
REAP_EXPIRED = f"""
WITH expired AS (
    SELECT id FROM {JOB_TABLE}
    WHERE state IN ({LEASED}) AND lease_expires_at < clock_timestamp()
      AND {OWNED_PARTITIONS}
    ORDER BY lease_expires_at
    LIMIT 10000
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE {JOB_TABLE} j
    SET state = CASE WHEN j.state = {CLAIMED} THEN {SCHEDULED}
                     WHEN j.delivery = {AT_MOST_ONCE} THEN {LOST}
                     WHEN j.attempts >= j.max_attempts THEN {DEAD}
                     ELSE {FAILED} END,
        run_at = CASE WHEN j.state = {RUNNING} THEN clock_timestamp() ELSE j.run_at END,
        finished_at = CASE WHEN j.state = {RUNNING} THEN clock_timestamp()
                           ELSE j.finished_at END,
        last_error = CASE WHEN j.state = {RUNNING} THEN %(error)s ELSE j.last_error END,
        errors = CASE WHEN j.state = {RUNNING} THEN j.errors || {ERROR_ENTRY}
                      ELSE j.errors END,
        claimed_by = '', lease_expires_at = NULL
    FROM expired WHERE j.id = expired.id
    RETURNING j.id
)
SELECT (SELECT count(*) FROM reaped) AS count,
       (SELECT floor(extract(epoch FROM min(lease_expires_at)) * 1000)::bigint
        FROM {JOB_TABLE}
        WHERE state IN ({LEASED}) AND lease_expires_at >= clock_timestamp()
          AND {OWNED_PARTITIONS}) AS next_expiry_ms
"""


def _jobs_insert(values: str, source: str, returning: str) -> str:
    """An insert of new jobs: `values` (NewJob's fields, in its order) for each row of
    `source`; every other column starts the same, stated here once."""
    return f"""
    INSERT INTO {JOB_TABLE} (handler, run_at, payload, max_attempts, retry_policy, delivery,
                             time_limit, idempotency_key,
                             state, attempts, lease_token, claimed_by, last_error, errors)
    SELECT {values},
           {SCHEDULED}, 0, 0, '', '', '[]'::jsonb
    FROM {source}
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING {returning}"""


INSERT_ROWS = _jobs_insert(
    values="""r.handler, r.run_at, r.payload, r.max_attempts, r.retry_policy, r.delivery,
           r.time_limit, r.idempotency_key""",
    source="""unnest(%(handlers)s::text[], %(run_ats)s::timestamptz[], %(payloads)s::jsonb[],
                %(max_attempts)s::integer[], %(retry_policies)s::jsonb[], %(deliveries)s::text[],
                %(time_limits)s::float8[], %(keys)s::text[])
         AS r(handler, run_at, payload, max_attempts, retry_policy, delivery, time_limit,
              idempotency_key)""",
    returning="id, idempotency_key, created_at",
)

# The planner's insert is the whole cost of planning a slice: the members' query (the
# planner's, `slice`: id and run_at) and one set-based insert, proportional to the slice.
SLICE_JOBS = _jobs_insert(
    values="""%(handler)s::text, slice.run_at,
           %(payload)s::jsonb || jsonb_build_object('member_id', slice.id),
           %(max_attempts)s::integer, %(retry_policy)s::jsonb,
           %(delivery)s::text, %(time_limit)s::float8, %(key_prefix)s::text || slice.id""",
    source="slice WHERE slice.run_at >= %(not_before)s ORDER BY slice.run_at",
    returning="1",
)


@cache
def slice_insert(members_sql: str) -> str:
    """The planner's statement around its members' query (one text per query): the jobs
    inserted, and how many were planned and missed, in one round trip."""
    return f"""
WITH slice AS ({members_sql}
), planned AS ({SLICE_JOBS}
)
SELECT (SELECT count(*) FROM planned) AS planned,
       (SELECT count(*) FROM slice WHERE slice.run_at < %(not_before)s) AS missed
"""


T = TypeVar("T")


def rows_of(cls: type[T]) -> RowFactory[T]:
    """A psycopg row factory: each row as `cls`, its columns matched to the fields by
    name once per result, then built by position (a claim may return 50,000 rows)."""
    wanted = [field.name for field in fields(cls)]

    def maker(cursor):
        if cursor.description is None:  # a result without rows (a command)
            return no_result
        names = [column.name for column in cursor.description]
        if not set(wanted) <= set(names):
            raise LookupError(f"{cls.__name__} needs the columns {wanted}, got {names}")
        if names == wanted:
            return lambda values: cls(*values)
        positions = [names.index(name) for name in wanted]
        return lambda values: cls(*[values[i] for i in positions])

    return maker


@contextmanager
def _cursor(row_factory: RowFactory | None = None) -> Iterator[Any]:
    """A cursor of the default connection (planned each time), rows made by `row_factory`."""
    with connection.cursor() as cursor:
        if row_factory is not None:
            cursor.cursor.row_factory = row_factory
        yield cursor


def _partition_params(partitions: int, owned: Sequence[int]) -> dict[str, Any]:
    return {
        "partitions": partitions,
        "owned": list(owned),
        "all_partitions": len(set(owned)) >= partitions,
    }


def _loaded(value: Any) -> Any:
    """A JSON column as Python (Django's sessions load jsonb as text)."""
    return json.loads(value) if isinstance(value, str) else value


def _json_texts(values: Iterable[Any]) -> list[str]:
    """Each value as JSON text; rows that share one object (a batch's common retry
    policy) share its text instead of serialising it again."""
    texts: dict[int, str] = {}
    return [texts.get(id(v)) or texts.setdefault(id(v), json.dumps(v)) for v in values]


_DUE_JOBS, _CLAIMS, _REAPED = rows_of(DueJob), rows_of(Claim), rows_of(Reaped)
_INSERTED, _PLANNED = rows_of(InsertedJob), rows_of(PlannedSlice)


class PostgresJobStore:
    """The JobStore of PostgreSQL (see tasksapp.engine.store.base for each operation)."""

    notifies = True

    def configure_session(self, connection: Any) -> None:
        pg_session.configure_session(connection)

    def flush_commits(self) -> None:
        pg_session.flush_commits()

    def poll_due(self, window: PollWindow) -> list[DueJob]:
        after_run_at, after_id = window.after if window.after else (None, None)
        params = {
            "lookahead": window.lookahead,
            "limit": window.limit,
            "after_run_at": after_run_at,
            "after_id": after_id,
            **_partition_params(window.partitions, window.owned),
        }
        with _cursor(_DUE_JOBS) as cursor:
            cursor.execute(POLL_DUE, params)
            return cursor.fetchall()

    def claim_due(self, *, ids: Sequence[int], owner: str, ttl: float, lead: float) -> list[Claim]:
        params = {"ids": list(ids), "owner": owner, "ttl": ttl, "lead": lead}
        with _cursor(_CLAIMS) as cursor:  # not prepared: its best plan depends on the ids
            cursor.execute(CLAIM_DUE, params)
            return cursor.fetchall()

    def reap_expired(self, *, partitions: int, owned: Sequence[int], error: str) -> Reaped:
        params = {"error": error, "kind": LEASE_EXPIRED_KIND}
        with _cursor(_REAPED) as cursor:
            cursor.execute(REAP_EXPIRED, {**params, **_partition_params(partitions, owned)})
            return cursor.fetchone()

    def start(
        self, *, claims: Sequence[tuple[int, int]], worker: str, ttl: float, lead: float
    ) -> list[StartedJob]:
        ids, tokens = zip(*claims, strict=True)
        params = {"ids": list(ids), "tokens": list(tokens), "worker": worker, "ttl": ttl}
        sent = time.monotonic()
        with engine_cursor() as cursor:
            cursor.execute(START_CLAIMED, {**params, "lead": lead})
            rows = cursor.fetchall()
        received = time.monotonic()
        if not rows:
            return []
        named = [dict(zip(STARTED_COLUMNS, row, strict=True)) for row in rows]
        clock = DatabaseTime(max(row["read_ms"] for row in named), received, sent)
        return [_started(row, clock) for row in named]

    def succeed(self, *, outcomes: Sequence[tuple[int, int, Any, float | None]]) -> set[int]:
        ids, tokens, results, began_ms = zip(*outcomes, strict=True)
        params = {
            "ids": list(ids),
            "tokens": list(tokens),
            "results": [None if result is None else json.dumps(result) for result in results],
            "began_ms": list(began_ms),
        }
        with engine_cursor() as cursor:
            cursor.execute(SUCCEED_RUNNING, params)
            return {job_id for (job_id,) in cursor.fetchall()}

    def fail(self, attempt: FailedAttempt) -> bool:
        params = {
            "id": attempt.job_id,
            "token": attempt.token,
            "state": attempt.state,
            "delay": attempt.retry_in or 0.0,
            "error": attempt.error,
            "kind": attempt.kind,
            "began_ms": attempt.began_ms,
        }
        with _cursor() as cursor:
            cursor.execute(FAIL_RUNNING, params)
            return cursor.fetchone() is not None

    def renew(self, *, leases: Sequence[tuple[int, int]], ttl: float) -> int:
        ids, tokens = zip(*leases, strict=True)
        with _cursor() as cursor:
            cursor.execute(RENEW_RUNNING, {"ids": list(ids), "tokens": list(tokens), "ttl": ttl})
            return cursor.rowcount

    def database_time(self) -> DatabaseTime:
        sent = time.monotonic()
        with engine_cursor() as cursor:
            cursor.execute(DB_CLOCK_MS, {})
            (read_ms,) = cursor.fetchone()
        return DatabaseTime(read_ms, time.monotonic(), sent)

    def insert_jobs(
        self, source: Sequence[NewJob] | MemberSlice
    ) -> list[InsertedJob] | PlannedSlice:
        if isinstance(source, MemberSlice):
            return self._insert_slice(source)
        return self._insert_rows(source)

    def _insert_rows(self, jobs: Sequence[NewJob]) -> list[InsertedJob]:
        params = {
            "handlers": [job.handler for job in jobs],
            "payloads": _json_texts(job.payload for job in jobs),
            "run_ats": [job.run_at for job in jobs],
            "max_attempts": [job.max_attempts for job in jobs],
            "retry_policies": _json_texts(job.retry_policy for job in jobs),
            "deliveries": [job.delivery for job in jobs],
            # float8[]: one array takes one type (a limit may be given as an int)
            "time_limits": [
                None if job.time_limit is None else float(job.time_limit) for job in jobs
            ],
            "keys": [job.idempotency_key for job in jobs],
        }
        with _cursor(_INSERTED) as cursor:
            cursor.execute(INSERT_ROWS, params)
            return cursor.fetchall()

    def _insert_slice(self, source: MemberSlice) -> PlannedSlice:
        template = source.template
        params = {
            **source.members_params,
            "handler": template.handler,
            "payload": json.dumps(template.payload),
            "max_attempts": template.max_attempts,
            "retry_policy": json.dumps(template.retry_policy),
            "delivery": template.delivery,
            "time_limit": template.time_limit,
            "key_prefix": source.key_prefix,
            "not_before": source.not_before,
        }
        with _cursor(_PLANNED) as cursor:
            cursor.execute(slice_insert(source.members_sql), params)
            return cursor.fetchone()


def _started(row: dict[str, Any], clock: DatabaseTime) -> StartedJob:
    del row["read_ms"]
    row["payload"], row["retry_policy"] = _loaded(row["payload"]), _loaded(row["retry_policy"])
    return StartedJob(**row, clock=clock)
