"""The engine's state transitions. Each has exactly one owning function here.

Every transition is one conditional UPDATE guarded on the current state and, once a job
was claimed, on its fencing token: a process that lost its lease can never start,
finish, fail or re-run the job. PostgreSQL runs the batch statements of `tasksapp.engine.sql`
with the database clock; other databases (the embedded SQLite mode) run the same guards
through the ORM inside one transaction.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from tasksapp.engine import sql
from tasksapp.engine.models import Job, JobState
from tasksapp.engine.models.jobs import DUE_STATES
from tasksapp.engine.sessions import engine_cursor

LEASE_EXPIRED_ERROR = "worker lost: lease expired before the job finished"


@dataclass(frozen=True)
class Claim:
    id: int
    token: int
    run_at_ms: float  # exact, to the microsecond: when the job may start


@dataclass(frozen=True)
class DatabaseTime:
    """A lower bound of the database clock, from one round trip: the database read its
    clock (`read_ms`) before this process had the answer (`received`, time.monotonic()),
    so at any later moment t it shows at least read_ms + (t - received). Too early by at
    most the answer's way back; never too late, so a wait for it never ends early."""

    read_ms: float
    received: float
    sent: float  # time.monotonic() when the question left: the bound is this loose at most

    @property
    def round_trip_ms(self) -> float:
        return (self.received - self.sent) * 1000

    def tighter(self, other: DatabaseTime) -> DatabaseTime:
        """Of two valid lower bounds, the higher one."""
        mine, theirs = self.read_ms - self.received * 1000, other.read_ms - other.received * 1000
        return self if mine >= theirs else other

    def at_least_ms(self, moment: float | None = None) -> float:
        moment = time.monotonic() if moment is None else moment
        return self.read_ms + (moment - self.received) * 1000

    def moment_of(self, db_ms: float) -> float:
        """The time.monotonic() by which the database clock has surely reached db_ms."""
        return self.received + (db_ms - self.read_ms) / 1000


@dataclass(frozen=True)
class StartedJob:
    id: int
    token: int
    handler: str
    payload: Any
    attempt: int
    max_attempts: int
    delivery: str
    retry_policy: dict
    idempotency_key: str
    run_at: dt.datetime
    time_limit: float | None
    clock: DatabaseTime

    @property
    def begins_at(self) -> float:
        """The time.monotonic() at which the handler may begin: run_at, surely."""
        return self.clock.moment_of(_ms_exact(self.run_at))


def _is_postgres() -> bool:
    return connection.vendor == "postgresql"


def _ms(value: dt.datetime) -> int:
    return int(value.timestamp() * 1000)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def _ms_exact(value: dt.datetime) -> float:
    return ((value - _EPOCH) // _MICROSECOND) / 1000  # whole microseconds, then ms


def _from_ms(ms: float) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=ms)


def _secs(seconds: float) -> dt.timedelta:
    return dt.timedelta(seconds=seconds)


def _partition_params(partitions: int, owned: Sequence[int]) -> dict[str, Any]:
    return {
        "partitions": partitions,
        "owned": list(owned),
        "all_partitions": len(set(owned)) >= partitions,
    }


def _in_partitions(partitions: int, owned: Sequence[int]) -> Q:
    if len(set(owned)) >= partitions:
        return Q()
    from django.db.models.functions import Mod

    return Q(pk__in=Job.objects.alias(p=Mod("id", partitions)).filter(p__in=owned).values("id"))


# --- dispatcher side -------------------------------------------------------------------


@dataclass(frozen=True)
class DueJob:
    id: int
    run_at_ms: int
    run_at: dt.datetime  # exact, for the keyset of the next page


def job_poll_due(
    *,
    lookahead: float,
    partitions: int,
    owned: Sequence[int],
    limit: int,
    after: tuple[dt.datetime, int] | None = None,
) -> list[DueJob]:
    """Pending jobs due before now + lookahead in the owned partitions, ordered by
    (run_at, id), starting after the keyset `after` = (run_at, id) of a previous page."""
    after_run_at, after_id = after if after else (None, None)
    if _is_postgres():
        params = {
            "lookahead": lookahead,
            "limit": limit,
            "after_run_at": after_run_at,
            "after_id": after_id,
            **_partition_params(partitions, owned),
        }
        with connection.cursor() as cursor:
            cursor.execute(sql.POLL_DUE, params)
            return [DueJob(*row) for row in cursor.fetchall()]
    horizon = timezone.now() + _secs(lookahead)
    jobs = Job.objects.filter(_in_partitions(partitions, owned), state__in=DUE_STATES)
    if after_run_at is not None:
        jobs = jobs.filter(Q(run_at__gt=after_run_at) | Q(run_at=after_run_at, id__gt=after_id))
    rows = (
        jobs.filter(run_at__lt=horizon).order_by("run_at", "id").values_list("id", "run_at")[:limit]
    )
    return [DueJob(job_id, _ms(run_at), run_at) for job_id, run_at in rows]


def job_claim_due(*, ids: Sequence[int], owner: str, ttl: float, lead: float = 1.0) -> list[Claim]:
    """scheduled|failed → claimed, in one statement. Returns the claims this caller won."""
    if not ids:
        return []
    if _is_postgres():
        params = {"ids": list(ids), "owner": owner, "ttl": ttl, "lead": lead}
        with connection.cursor() as cursor:  # planned each time: sees the ids it gets
            cursor.execute(sql.CLAIM_DUE, params)
            return [Claim(*row) for row in cursor.fetchall()]
    with transaction.atomic():
        now = timezone.now()
        won = list(
            Job.objects.filter(
                id__in=ids, state__in=DUE_STATES, run_at__lte=now + _secs(lead)
            ).values_list("id", "lease_token", "run_at")
        )
        Job.objects.filter(id__in=[row[0] for row in won], state__in=DUE_STATES).update(
            state=JobState.CLAIMED,
            lease_token=F("lease_token") + 1,
            claimed_by=owner,
            claimed_at=now,
            lease_expires_at=now + _secs(ttl),
        )
    return [Claim(job_id, token + 1, _ms_exact(run_at)) for job_id, token, run_at in won]


def job_reap_expired(*, partitions: int, owned: Sequence[int]) -> tuple[int, int | None]:
    """Return expired leases in the owned partitions; (reaped, next expiry in ms or None)."""
    if _is_postgres():
        params = {"error": LEASE_EXPIRED_ERROR, **_partition_params(partitions, owned)}
        with connection.cursor() as cursor:
            cursor.execute(sql.REAP_EXPIRED, params)
            reaped, next_ms = cursor.fetchone()
            return int(reaped), next_ms
    return _reap_expired_orm(partitions, owned)


def _reap_expired_orm(partitions: int, owned: Sequence[int]) -> tuple[int, int | None]:
    scope = Job.objects.filter(_in_partitions(partitions, owned))
    with transaction.atomic():
        now = timezone.now()
        expired = scope.filter(
            state__in=[JobState.CLAIMED, JobState.RUNNING], lease_expires_at__lt=now
        )
        reaped = expired.filter(state=JobState.CLAIMED).update(
            state=JobState.SCHEDULED, claimed_by="", lease_expires_at=None
        )
        for job in expired.filter(state=JobState.RUNNING):
            reaped += _lose_running_orm(job, now)
        upcoming = (
            scope.filter(state__in=[JobState.CLAIMED, JobState.RUNNING], lease_expires_at__gte=now)
            .order_by("lease_expires_at")
            .values_list("lease_expires_at", flat=True)
            .first()
        )
    return reaped, (_ms(upcoming) if upcoming else None)


def _lose_running_orm(job: Job, now: dt.datetime) -> int:
    if job.delivery == "at_most_once":
        state = JobState.LOST
    elif job.attempts >= job.max_attempts:
        state = JobState.DEAD
    else:
        state = JobState.FAILED
    entry = {
        "attempt": job.attempts,
        "at": now.isoformat(),
        "error": LEASE_EXPIRED_ERROR,
        "kind": "lease_expired",
    }
    return Job.objects.filter(
        id=job.id, state=JobState.RUNNING, lease_token=job.lease_token
    ).update(
        state=state,
        run_at=now,
        finished_at=now,
        last_error=LEASE_EXPIRED_ERROR,
        errors=[*job.errors, entry],
        claimed_by="",
        lease_expires_at=None,
    )


# --- worker side -----------------------------------------------------------------------


START_LEAD_SECONDS = 1.0  # a job is started at most this long before its run time


def job_start(*, claims: Sequence[tuple[int, int]], worker: str, ttl: float) -> list[StartedJob]:
    """claimed → running for each (id, token) still holding its claim and due within
    START_LEAD_SECONDS. The handler must not begin before `StartedJob.begins_at`."""
    if not claims:
        return []
    ids, tokens = zip(*claims, strict=True)
    if _is_postgres():
        params = {
            "ids": list(ids),
            "tokens": list(tokens),
            "worker": worker,
            "ttl": ttl,
            "lead": START_LEAD_SECONDS,
        }
        sent = time.monotonic()
        with engine_cursor() as cursor:
            cursor.execute(sql.START_CLAIMED, params)
            rows = cursor.fetchall()
        received = time.monotonic()
        if not rows:
            return []
        clock = DatabaseTime(max(row[11] for row in rows), received, sent)
        return [_started(row, clock) for row in rows]
    return _start_orm(claims, worker, ttl)


def database_time() -> DatabaseTime:
    """One round trip's lower bound of the database clock (this machine's without
    PostgreSQL)."""
    if not _is_postgres():
        now = time.monotonic()
        return DatabaseTime(time.time() * 1000, now, now)
    sent = time.monotonic()
    with engine_cursor() as cursor:
        cursor.execute(sql.DB_CLOCK_MS, {})
        (read_ms,) = cursor.fetchone()
    return DatabaseTime(read_ms, time.monotonic(), sent)


def _started(row: Sequence[Any], clock: DatabaseTime) -> StartedJob:
    payload, policy = row[3], row[7]
    if isinstance(payload, str):
        payload = json.loads(payload)
    if isinstance(policy, str):
        policy = json.loads(policy)
    return StartedJob(*row[:3], payload, *row[4:7], policy, *row[8:11], clock)


def _start_orm(claims: Sequence[tuple[int, int]], worker: str, ttl: float) -> list[StartedJob]:
    """Without PostgreSQL (the embedded SQLite mode) the database clock is this machine's."""
    started = []
    with transaction.atomic():
        now = timezone.now()
        for job_id, token in claims:
            claimed = Job.objects.filter(
                id=job_id,
                lease_token=token,
                state=JobState.CLAIMED,
                run_at__lte=now + _secs(START_LEAD_SECONDS),
            )
            run_at = claimed.values_list("run_at", flat=True).first()
            if run_at is None:
                continue
            begins = max(run_at, now)
            if claimed.update(
                state=JobState.RUNNING,
                attempts=F("attempts") + 1,
                started_at=begins,
                claimed_by=worker,
                lease_expires_at=begins + _secs(ttl),
            ):
                started.append(Job.objects.get(id=job_id))
    clock = database_time()
    return [
        StartedJob(
            job.id,
            job.lease_token,
            job.handler,
            job.payload,
            job.attempts,
            job.max_attempts,
            job.delivery,
            job.retry_policy,
            job.idempotency_key,
            job.run_at,
            job.time_limit,
            clock,
        )
        for job in started
    ]


def job_succeed(*, outcomes: Iterable[tuple[int, int, Any, float | None]]) -> set[int]:
    """running → succeeded for each (id, token, result, began_ms) still holding its lease;
    began_ms, when the handler began (database time, ms), replaces the planned start."""
    outcomes = list(outcomes)
    if not outcomes:
        return set()
    if _is_postgres():
        params = {
            "ids": [o[0] for o in outcomes],
            "tokens": [o[1] for o in outcomes],
            "results": [None if o[2] is None else json.dumps(o[2]) for o in outcomes],
            "began_ms": [o[3] for o in outcomes],
        }
        with engine_cursor() as cursor:
            cursor.execute(sql.SUCCEED_RUNNING, params)
            return {row[0] for row in cursor.fetchall()}
    done = set()
    now = timezone.now()
    for job_id, token, result, began_ms in outcomes:
        began = {} if began_ms is None else {"started_at": _from_ms(began_ms)}
        if Job.objects.filter(id=job_id, lease_token=token, state=JobState.RUNNING).update(
            state=JobState.SUCCEEDED, finished_at=now, result=result, lease_expires_at=None, **began
        ):
            done.add(job_id)
    return done


def job_fail(
    *,
    job_id: int,
    token: int,
    error: str,
    kind: str,
    retry_in: float | None,
    began_ms: float | None = None,
) -> bool:
    """running → failed (retry after `retry_in` s) or → dead (`retry_in` is None)."""
    state = JobState.DEAD if retry_in is None else JobState.FAILED
    error = error[:4000]
    if _is_postgres():
        params = {
            "id": job_id,
            "token": token,
            "state": state,
            "delay": retry_in or 0.0,
            "error": error,
            "kind": kind,
            "began_ms": began_ms,
        }
        with connection.cursor() as cursor:
            cursor.execute(sql.FAIL_RUNNING, params)
            return cursor.fetchone() is not None
    with transaction.atomic():
        job = Job.objects.filter(id=job_id, lease_token=token, state=JobState.RUNNING).first()
        if job is None:
            return False
        now = timezone.now()
        entry = {"attempt": job.attempts, "at": now.isoformat(), "error": error, "kind": kind}
        return bool(
            Job.objects.filter(id=job_id, lease_token=token, state=JobState.RUNNING).update(
                state=state,
                run_at=now + _secs(retry_in) if retry_in is not None else job.run_at,
                started_at=job.started_at if began_ms is None else _from_ms(began_ms),
                finished_at=now,
                last_error=error,
                errors=[*job.errors, entry],
                claimed_by="",
                lease_expires_at=None,
            )
        )


def job_renew(*, leases: Sequence[tuple[int, int]], ttl: float) -> int:
    """Extend the leases of running jobs this process still holds."""
    if not leases:
        return 0
    ids, tokens = zip(*leases, strict=True)
    if _is_postgres():
        with connection.cursor() as cursor:
            cursor.execute(
                sql.RENEW_RUNNING, {"ids": list(ids), "tokens": list(tokens), "ttl": ttl}
            )
            return cursor.rowcount
    until = timezone.now() + _secs(ttl)
    return sum(
        Job.objects.filter(id=i, lease_token=t, state=JobState.RUNNING).update(
            lease_expires_at=until
        )
        for i, t in leases
    )
