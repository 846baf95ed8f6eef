"""Jobs one by one: schedule, cancel, retry, run now; and the set-based owner of each
operator's transition, which the single-job actions and the bulk action share. Bad input
raises JobInputError and stores nothing."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.db.models import Q
from django.utils import timezone

from tasksapp.engine.models import Delivery, Job, JobState
from tasksapp.engine.models.jobs import (
    DUE_STATES,
    LEASED_STATES,
    RETRYABLE_STATES,
    new_idempotency_key,
)
from tasksapp.engine.options import (
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    JobOptions,
    JobOptionsError,
    validated_handler,
    validated_idempotency_key,
    validated_payload,
)
from tasksapp.engine.store import job_store
from tasksapp.engine.store.rows import InsertedJob, NewJob

ERR_RUN_AT_TYPE = "run_at must be a datetime."
ERR_RUN_AT_NAIVE = "run_at must be timezone-aware (got a naive datetime)."
ERR_RUN_AT_RANGE = (
    "run_at must lie between {earliest} and {latest} (at most {past_days} days in the past"
    " and {future_years} years ahead)."
)
ERR_KEY_CONFLICT = (
    "idempotency_key '{key}' is taken by job {job_id} with different {fields}: use a new key,"
    " or the same parameters to get that job back."
)
ERR_NOT_FOUND = "job {job_id} does not exist."
ERR_CANCEL_STATE = (
    "job {job_id} is {state}: only scheduled, failed, claimed or running jobs can be cancelled."
)
ERR_RETRY_STATE = (
    "job {job_id} is {state}: only dead, lost, cancelled or failed jobs can be retried."
)
ERR_RUN_NOW_STATE = "job {job_id} is {state}: only scheduled or failed jobs can be run now."


# How far from now a run time may lie: further back it is a mistake (and would read as
# years of start lag); further ahead, date arithmetic on it nears the calendar's end.
RUN_AT_PAST = dt.timedelta(days=1)
RUN_AT_FUTURE_YEARS = 10
RUN_AT_FUTURE = dt.timedelta(days=365 * RUN_AT_FUTURE_YEARS + 3)
# What a retry takes back to `scheduled` (job_retry, and the bulk retry by filter).
# What makes two jobs the same job, when one key names both (run_at excepted: callers
# compute it from the clock, so a repeated request carries a slightly different one).
IDENTITY_FIELDS = (
    "handler",
    "payload",
    "delivery",
    "max_attempts",
    "retry_policy",
    "time_limit",
    "queue",
    "priority",
    "concurrency_key",
)


class JobInputError(ValueError):
    """Bad input to a job service; the message says what to fix."""


class IdempotencyConflict(JobInputError):
    """The idempotency key belongs to a stored job with other parameters."""

    def __init__(self, message: str, *, job_id: int) -> None:
        super().__init__(message)
        self.job_id = job_id


def _validated_run_at(run_at: Any) -> dt.datetime:
    if not isinstance(run_at, dt.datetime):
        raise JobInputError(ERR_RUN_AT_TYPE)
    if timezone.is_naive(run_at):
        raise JobInputError(ERR_RUN_AT_NAIVE)
    now = timezone.now()
    earliest, latest = now - RUN_AT_PAST, now + RUN_AT_FUTURE
    if not earliest <= run_at <= latest:
        raise JobInputError(
            ERR_RUN_AT_RANGE.format(
                earliest=earliest.isoformat(timespec="seconds"),
                latest=latest.isoformat(timespec="seconds"),
                past_days=RUN_AT_PAST.days,
                future_years=RUN_AT_FUTURE_YEARS,
            )
        )
    return run_at


def job_schedule(
    *,
    handler: str,
    run_at: dt.datetime,
    payload: Any = None,
    idempotency_key: str | None = None,
    max_attempts: int = 5,
    retry_policy: dict | None = None,
    delivery: str = Delivery.TRANSACTIONAL,
    time_limit: float | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int | str = DEFAULT_PRIORITY,
    concurrency_key: str = "",
) -> Job:
    """Store a job to run `handler(context)` at `run_at`, exactly once.

    Scheduling the same idempotency key again returns the existing job unchanged; with
    other parameters (handler, payload, options) it raises IdempotencyConflict. `queue`,
    `priority` (0-9 or a level name) and `concurrency_key` route it (docs/ROUTING.md).
    """
    job, _ = job_schedule_or_get(
        handler=handler,
        run_at=run_at,
        payload=payload,
        idempotency_key=idempotency_key,
        max_attempts=max_attempts,
        retry_policy=retry_policy,
        delivery=delivery,
        time_limit=time_limit,
        queue=queue,
        priority=priority,
        concurrency_key=concurrency_key,
    )
    return job


def job_schedule_or_get(
    *,
    handler: str,
    run_at: dt.datetime,
    payload: Any = None,
    idempotency_key: str | None = None,
    max_attempts: int = 5,
    retry_policy: dict | None = None,
    delivery: str = Delivery.TRANSACTIONAL,
    time_limit: float | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int | str = DEFAULT_PRIORITY,
    concurrency_key: str = "",
) -> tuple[Job, bool]:
    """job_schedule, telling whether this call stored the job (True) or found it stored
    under its key (False). Of callers racing with one key exactly one gets True: the
    insert decides, not a look beforehand."""
    job = _new_job(
        handler=handler,
        run_at=run_at,
        payload=payload,
        idempotency_key=idempotency_key,
        max_attempts=max_attempts,
        retry_policy=retry_policy,
        delivery=delivery,
        time_limit=time_limit,
        queue=queue,
        priority=priority,
        concurrency_key=concurrency_key,
    )
    inserted = job_store().insert_jobs([job])
    if not inserted:  # the key was scheduled before: that job, unchanged
        return _same_job(job, Job.objects.get(idempotency_key=job.idempotency_key)), False
    return _stored(job, inserted[0]), True


def job_schedule_check(**arguments: Any) -> None:
    """The checks of `job_schedule` (the same arguments), nothing stored: JobInputError
    says what is wrong (a caller that stores the job later, at a commit)."""
    _new_job(**arguments)


def _new_job(
    *,
    handler: str,
    run_at: dt.datetime,
    payload: Any = None,
    idempotency_key: str | None = None,
    max_attempts: int = 5,
    retry_policy: dict | None = None,
    delivery: str = Delivery.TRANSACTIONAL,
    time_limit: float | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int | str = DEFAULT_PRIORITY,
    concurrency_key: str = "",
) -> NewJob:
    """A job to insert, every argument checked; JobInputError says what is wrong."""
    try:
        validated_handler(handler)
        options = JobOptions.validated(
            max_attempts=max_attempts,
            retry_policy=retry_policy,
            delivery=delivery,
            time_limit=time_limit,
            queue=queue,
            priority=priority,
            concurrency_key=concurrency_key,
        )
        run_at = _validated_run_at(run_at)
        payload = validated_payload(payload)
        validated_idempotency_key(idempotency_key)
    except JobOptionsError as exc:
        raise JobInputError(str(exc)) from exc
    return NewJob(
        handler=handler,
        run_at=run_at,
        payload=payload,
        **options.as_fields(),
        idempotency_key=new_idempotency_key() if idempotency_key is None else idempotency_key,
    )


def _same_job(wanted: NewJob, stored: Job) -> Job:
    """The stored job, if it is the one asked for again; else IdempotencyConflict."""
    differ = [name for name in IDENTITY_FIELDS if getattr(wanted, name) != getattr(stored, name)]
    if differ:
        message = ERR_KEY_CONFLICT.format(
            key=stored.idempotency_key, job_id=stored.id, fields=", ".join(differ)
        )
        raise IdempotencyConflict(message, job_id=stored.id)
    return stored


def _stored(job: NewJob, row: InsertedJob) -> Job:
    """The model of a job just inserted: its fields, the database's id and creation time,
    and the model's defaults for the other columns (the insert's defaults too)."""
    stored = Job(id=row.id, created_at=row.created_at, **vars(job))
    stored._state.adding, stored._state.db = False, Job.objects.db
    return stored


def _get(job_id: int) -> Job:
    job = Job.objects.filter(id=job_id).first()
    if job is None:
        raise JobInputError(ERR_NOT_FOUND.format(job_id=job_id))
    return job


# The jobs each operator's action may change: the guards of the owners below, also read
# by the bulk action's dry run.
RETRYABLE = Q(state__in=RETRYABLE_STATES)
WAITING = Q(state__in=DUE_STATES)
CANCEL_ASKABLE = Q(state__in=LEASED_STATES, cancel_requested_at__isnull=True)

# --- the owners: each transition of an operator's, set-based --------------------------


def job_retry_many(*, ids: Sequence[int], run_at: dt.datetime | None = None) -> int:
    """dead|lost|cancelled|failed → scheduled at `run_at` (None: now, by the database's
    clock), with one more attempt allowed than used, for each of `ids` in such a state;
    how many moved."""
    return job_store().retry(ids=ids, run_at=run_at)


def job_cancel_waiting_many(*, ids: Sequence[int]) -> int:
    """scheduled|failed → cancelled for each of `ids` in such a state; how many."""
    return job_store().cancel_waiting(ids=ids)


def job_cancel_request_many(*, ids: Sequence[int]) -> int:
    """A cancel requested of each of `ids` claimed or running and not asked yet: its
    worker stops the handler where it checks; how many were asked."""
    return job_store().request_cancel(ids=ids)


def job_run_now_many(*, ids: Sequence[int]) -> int:
    """The run time of each of `ids` waiting (scheduled|failed) moved to now, its state
    kept; how many. The jobs table's trigger tells the dispatchers at once."""
    return job_store().run_now(ids=ids)


# --- one job -------------------------------------------------------------------------


def job_cancel_waiting(*, job_id: int) -> bool:
    """scheduled|failed → cancelled; False (and nothing asked) for a job in any other
    state. For callers that must not interrupt a job already claimed or running."""
    return bool(job_cancel_waiting_many(ids=[job_id]))


CANCEL_TRIES = 3  # a job may move between waiting and leased while it is cancelled


def job_cancel(*, job_id: int) -> Job:
    """scheduled|failed → cancelled at once. A claimed or running job keeps its state and
    gets `cancel_requested_at`: its worker learns of it at the start or at the next
    lease renewal, the handler stops where it checks (``ctx.raise_if_cancelled()``) and
    the job ends cancelled; a handler that never checks finishes, or ends at its time
    limit. Cancelling again changes nothing."""
    for _ in range(CANCEL_TRIES):
        if job_cancel_waiting_many(ids=[job_id]) or job_cancel_request_many(ids=[job_id]):
            break
        job = _get(job_id)
        asked = job.state in LEASED_STATES and job.cancel_requested_at is not None
        if job.state == JobState.CANCELLED or asked:
            return job
        if job.state not in (*DUE_STATES, *LEASED_STATES):
            raise JobInputError(ERR_CANCEL_STATE.format(job_id=job_id, state=job.state))
    return _get(job_id)


def job_retry(*, job_id: int, run_at: dt.datetime | None = None) -> Job:
    """dead|lost|cancelled|failed → scheduled at `run_at` (default now), with one more
    attempt allowed than it has used."""
    when = _validated_run_at(run_at) if run_at is not None else None
    _get(job_id)
    if not job_retry_many(ids=[job_id], run_at=when):
        raise JobInputError(ERR_RETRY_STATE.format(job_id=job_id, state=_get(job_id).state))
    return _get(job_id)


def job_run_now(*, job_id: int) -> Job:
    """Move the run time of a waiting (scheduled|failed) job to now; its state stays.
    The jobs table's trigger tells the dispatchers at once."""
    moved = job_run_now_many(ids=[job_id])
    job = _get(job_id)
    if not moved:
        raise JobInputError(ERR_RUN_NOW_STATE.format(job_id=job_id, state=job.state))
    return job
