"""The job store on PostgreSQL: the named statements of `postgres_sql.py`, run with the
database clock, their rows read by column name into the dataclasses of `rows.py`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields, replace
from functools import lru_cache
from typing import Any, TypeVar

from psycopg.rows import RowFactory, no_result
from psycopg.types.json import Jsonb

from tasksapp.engine.cluster.sql import DISPATCHER_LOCK_CLASS, WORKER_LOCK_CLASS
from tasksapp.engine.db import tempo_atomic, tempo_connection

from . import pg_session
from . import postgres_sql as sql
from .base import (
    FREE_LOST_RUNS,
    LEASE_EXPIRED_KIND,
    LOST_RUN_KIND,
    InsertsBySource,
    OperatorTransitions,
)
from .pg_session import engine_cursor
from .rows import (
    Claim,
    DatabaseTime,
    DueJob,
    FailedAttempt,
    InsertedJob,
    LimitedClaims,
    MemberSlice,
    NewJob,
    PlannedSlice,
    PollWindow,
    QueueLimits,
    Reaped,
    Renewed,
    StartedJob,
    from_us,
)

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
    """A cursor of Tempo's connection (planned each time), rows made by `row_factory`."""
    with tempo_connection().cursor() as cursor:
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
_QUEUE_LIMITS = rows_of(QueueLimits)


class PostgresJobStore(InsertsBySource, OperatorTransitions):
    """The JobStore of PostgreSQL (see tasksapp.engine.store.base for each operation)."""

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
            cursor.execute(sql.POLL_DUE, params)
            return cursor.fetchall()

    def claim_due(self, *, ids: Sequence[int], owner: str, ttl: float, lead: float) -> list[Claim]:
        params = {"ids": list(ids), "owner": owner, "ttl": ttl, "lead": lead}
        with _cursor(_CLAIMS) as cursor:  # not prepared: its best plan depends on the ids
            cursor.execute(sql.CLAIM_DUE, params)
            return cursor.fetchall()

    def lock_queue(self, queue: str) -> QueueLimits | None:
        with _cursor(_QUEUE_LIMITS) as cursor:
            cursor.execute(sql.LOCK_QUEUE, {"queue": queue})
            return cursor.fetchone()

    def claim_limited(
        self,
        *,
        queue: str,
        ids: Sequence[int],
        owner: str,
        ttl: float,
        lead: float,
        room: int,
        limits: QueueLimits,
    ) -> LimitedClaims:
        params = {
            "queue": queue,
            "ids": list(ids),
            "owner": owner,
            "ttl": ttl,
            "lead": lead,
            "room": room,
            "limit": limits.concurrency_limit,
            "key_limit": limits.key_concurrency_limit,
        }
        with _cursor() as cursor:
            cursor.execute(sql.CLAIM_LIMITED, params)
            rows = cursor.fetchall()
        claims = [Claim(i, token, run_at_ms, q) for i, token, run_at_ms, q, won in rows if won]
        return LimitedClaims(claims=claims, held=[row[0] for row in rows if not row[4]])

    def set_rate_tat(self, queue: str, tat_ms: float) -> None:
        with _cursor() as cursor:
            cursor.execute(sql.SET_RATE_TAT, {"queue": queue, "tat_ms": tat_ms})

    def take_start(self, *, queue: str, interval: float, burst: int) -> float:
        params = {"queue": queue, "interval": interval, "slack": (burst - 1) * interval}
        with _cursor() as cursor:
            cursor.execute(sql.TAKE_START, params)
            return max(0.0, cursor.fetchone()[0])

    def rate_limits(self) -> dict[str, tuple[int, float]]:
        with _cursor() as cursor:
            cursor.execute(sql.RATE_LIMITS)
            return {name: (limit, period) for name, limit, period in cursor.fetchall()}

    def reap_expired(
        self,
        *,
        partitions: int,
        owned: Sequence[int],
        error: str,
        lost_run_error: str = "",
        waiting: Sequence[int] = (),
        ttl: float = 0.0,
    ) -> Reaped:
        params = {
            "error": error,
            "kind": LEASE_EXPIRED_KIND,
            "lost_run_error": lost_run_error or error,
            "lost_run_kind": LOST_RUN_KIND,
            "free_lost_runs": FREE_LOST_RUNS,
            "waiting": list(waiting),
            "ttl": ttl,
        }
        with _cursor(_REAPED) as cursor:
            cursor.execute(sql.REAP_EXPIRED, {**params, **_partition_params(partitions, owned)})
            reaped = cursor.fetchone()
        return replace(reaped, due=_loaded(reaped.due))

    def expire_dead_workers(self, *, grace: float) -> list[str]:
        params = {"grace": grace, "worker_class": WORKER_LOCK_CLASS}
        with tempo_atomic(), _cursor() as cursor:
            cursor.execute(sql.DEAD_WORKERS, params)
            dead = [name for (name,) in cursor.fetchall()]
            if dead:
                cursor.execute(sql.EXPIRE_HELD_OF, {"workers": dead})
                cursor.execute(sql.EXPIRE_LEASES_OF, {"workers": dead})
        return dead

    def expire_claims_of_dead_dispatchers(self) -> int:
        params = {"dispatcher_class": DISPATCHER_LOCK_CLASS}
        with _cursor() as cursor:
            cursor.execute(sql.EXPIRE_CLAIMS_OF_DEAD_DISPATCHERS, params)
            return cursor.rowcount

    def expire_lost_claims(self, *, owner: str, waiting: Sequence[int], settle: float) -> int:
        params = {"owner": owner, "waiting": list(waiting), "settle": settle}
        with _cursor() as cursor:
            cursor.execute(sql.EXPIRE_LOST_CLAIMS_OF, params)
            return cursor.rowcount

    def start(
        self,
        *,
        claims: Sequence[tuple[int, int]],
        worker: str,
        ttl: float,
        lead: float,
        defer_starts: bool = False,
    ) -> list[StartedJob]:
        params = {**sql.fenced_params(claims), "worker": worker, "ttl": ttl, "lead": lead}
        statement = sql.START_DEFERRING if defer_starts else sql.START_CLAIMED
        sent = time.monotonic()
        with engine_cursor() as cursor:
            cursor.execute(statement, params)
            rows = cursor.fetchall()
        received = time.monotonic()
        if not rows:
            return []
        clock = DatabaseTime(max(row[_READ_MS] for row in rows), received, sent)
        sent_order = {job_id: i for i, (job_id, _) in enumerate(claims)}  # by run_at
        rows.sort(key=lambda row: sent_order[row[0]])
        return [_started(row, clock) for row in rows]

    def start_held(
        self, *, began: Sequence[tuple[int, int, float | None]], worker: str, ttl: float
    ) -> Renewed:
        params = {
            **sql.fenced_params(began),
            "began": Jsonb({str(job_id): ms for job_id, _, ms in began if ms is not None}),
            "worker": worker,
            "ttl": ttl,
        }
        with _cursor() as cursor:
            cursor.execute(sql.START_HELD, params)
            rows = cursor.fetchall()
        return Renewed(len(rows), frozenset(job_id for job_id, cancel in rows if cancel))

    def prune_held(self, *, worker: str) -> None:
        with _cursor() as cursor:
            cursor.execute(sql.PRUNE_HELD, {"worker": worker})

    def succeed(
        self, *, outcomes: Sequence[tuple[int, int, Any, float | None]], worker: str = ""
    ) -> set[int]:
        with engine_cursor() as cursor:
            cursor.execute(sql.SUCCEED_RUNNING, sql.outcome_params(outcomes, worker))
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
            "traceback": attempt.traceback,
        }
        with _cursor() as cursor:
            cursor.execute(sql.FAIL_RUNNING, params)
            return cursor.fetchone() is not None

    def renew(self, *, leases: Sequence[tuple[int, int]], ttl: float) -> Renewed:
        with _cursor() as cursor:
            cursor.execute(sql.RENEW_RUNNING, {**sql.fenced_params(leases), "ttl": ttl})
            rows = cursor.fetchall()
        return Renewed(len(rows), frozenset(job_id for job_id, cancel in rows if cancel))

    def cancel_running(
        self, *, job_id: int, token: int, began_ms: float | None, reason: str | None = None
    ) -> bool:
        params = {"id": job_id, "token": token, "began_ms": began_ms, "reason": reason}
        with _cursor() as cursor:
            cursor.execute(sql.CANCEL_RUNNING, params)
            return cursor.fetchone() is not None

    def snooze(self, *, job_id: int, token: int, delay: float) -> bool:
        with _cursor() as cursor:
            cursor.execute(sql.SNOOZE_RUNNING, {"id": job_id, "token": token, "delay": delay})
            return cursor.fetchone() is not None

    def release(self, *, leases: Sequence[tuple[int, int]]) -> int:
        with _cursor() as cursor:
            cursor.execute(sql.RELEASE_RUNNING, sql.fenced_params(leases))
            return cursor.rowcount

    def database_time(self) -> DatabaseTime:
        sent = time.monotonic()
        with engine_cursor() as cursor:
            cursor.execute(sql.DB_CLOCK_MS, {})
            (read_ms,) = cursor.fetchone()
        return DatabaseTime(read_ms, time.monotonic(), sent)

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
            "queues": [job.queue for job in jobs],
            "priorities": [job.priority for job in jobs],
            "concurrency_keys": [job.concurrency_key for job in jobs],
        }
        with _cursor(_INSERTED) as cursor:
            cursor.execute(sql.INSERT_ROWS, params)
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
            "queue": template.queue,
            "priority": template.priority,
            "concurrency_key": template.concurrency_key,
            "key_prefix": source.key_prefix,
            "not_before": source.not_before,
        }
        with _cursor(_PLANNED) as cursor:
            cursor.execute(sql.slice_insert(source.members_sql), params)
            return cursor.fetchone()


_READ_MS = list(sql.STARTED_COLUMNS).index("read_ms")


def _started(row: tuple, clock: DatabaseTime) -> StartedJob:
    """A start's row (sql.STARTED_COLUMNS, then START_DEFERRING's `start_written`)."""
    (job_id, token, handler, payload, attempt, max_attempts, delivery, retry_policy, key,
     run_at_us, time_limit, cancel_requested, queue, _, *start_written) = row  # fmt: skip
    return StartedJob(
        job_id,
        token,
        handler,
        _loaded(payload),
        attempt,
        max_attempts,
        delivery,
        _retry_policy(retry_policy),
        key,
        from_us(run_at_us),
        time_limit,
        clock,
        cancel_requested,
        *start_written,
        queue=queue,
    )


@lru_cache(maxsize=256)
def _parsed_policy(text: str) -> dict:
    return json.loads(text)


def _retry_policy(value: Any) -> dict:
    """A started job's retry policy: parsed once per distinct text (a burst's jobs mostly
    share one), the parsed dict shared by them: the worker only reads it."""
    return _parsed_policy(value) if isinstance(value, str) else value
