"""Public API for jobs: schedule, cancel, retry. Bad input raises JobInputError and
stores nothing."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from tasksapp.engine.handlers import HandlerError, resolve_handler
from tasksapp.engine.models import Delivery, Job, JobState
from tasksapp.engine.models.jobs import DUE_STATES
from tasksapp.engine.retry import RetryPolicyError, validate_policy

ERR_RUN_AT_TYPE = "run_at must be a datetime."
ERR_RUN_AT_NAIVE = "run_at must be timezone-aware (got a naive datetime)."
ERR_PAYLOAD_JSON = "payload must be JSON-serialisable: {reason}"
ERR_MAX_ATTEMPTS = "max_attempts must be an integer between 1 and 1000."
ERR_DELIVERY = "delivery must be one of: {choices}."
ERR_TIME_LIMIT = "time_limit must be a positive number of seconds."
ERR_KEY = "idempotency_key must be a non-empty string of at most 200 characters."
ERR_NOT_FOUND = "job {job_id} does not exist."
ERR_CANCEL_STATE = "job {job_id} is {state}: only scheduled or failed jobs can be cancelled."
ERR_RETRY_STATE = (
    "job {job_id} is {state}: only dead, lost, cancelled or failed jobs can be retried."
)
ERR_RUN_NOW_STATE = "job {job_id} is {state}: only scheduled or failed jobs can be run now."


class JobInputError(ValueError):
    """Bad input to a job service; the message says what to fix."""


def _validated_run_at(run_at: Any) -> dt.datetime:
    if not isinstance(run_at, dt.datetime):
        raise JobInputError(ERR_RUN_AT_TYPE)
    if timezone.is_naive(run_at):
        raise JobInputError(ERR_RUN_AT_NAIVE)
    return run_at


def _validated_payload(payload: Any) -> Any:
    if payload is None:
        return {}
    try:
        return json.loads(json.dumps(payload, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise JobInputError(ERR_PAYLOAD_JSON.format(reason=exc)) from exc


def _validated_options(
    *, max_attempts: Any, delivery: Any, time_limit: Any, idempotency_key: Any
) -> None:
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not (1 <= max_attempts <= 1000)
    ):
        raise JobInputError(ERR_MAX_ATTEMPTS)
    if delivery not in Delivery.values:
        raise JobInputError(ERR_DELIVERY.format(choices=", ".join(Delivery.values)))
    if time_limit is not None and (
        isinstance(time_limit, bool)
        or not isinstance(time_limit, int | float)
        or not math.isfinite(time_limit)
        or time_limit <= 0
    ):
        raise JobInputError(ERR_TIME_LIMIT)
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not idempotency_key or len(idempotency_key) > 200
    ):
        raise JobInputError(ERR_KEY)


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
) -> Job:
    """Store a job to run `handler(context)` at `run_at`, exactly once.

    Scheduling the same idempotency key again returns the existing job unchanged.
    """
    try:
        resolve_handler(handler)
        policy = validate_policy(retry_policy)
    except (HandlerError, RetryPolicyError) as exc:
        raise JobInputError(str(exc)) from exc
    run_at = _validated_run_at(run_at)
    payload = _validated_payload(payload)
    _validated_options(
        max_attempts=max_attempts,
        delivery=delivery,
        time_limit=time_limit,
        idempotency_key=idempotency_key,
    )
    fields = dict(
        handler=handler,
        run_at=run_at,
        payload=payload,
        max_attempts=max_attempts,
        retry_policy=policy,
        delivery=delivery,
        time_limit=time_limit,
    )
    if idempotency_key is None:
        return Job.objects.create(**fields)
    try:
        with transaction.atomic():
            return Job.objects.create(idempotency_key=idempotency_key, **fields)
    except IntegrityError:
        existing = Job.objects.filter(idempotency_key=idempotency_key).first()
        if existing is None:
            raise
        return existing


def _get(job_id: int) -> Job:
    job = Job.objects.filter(id=job_id).first()
    if job is None:
        raise JobInputError(ERR_NOT_FOUND.format(job_id=job_id))
    return job


def job_cancel(*, job_id: int) -> Job:
    """scheduled|failed → cancelled. A job already claimed or running is not cancelled."""
    moved = Job.objects.filter(id=job_id, state__in=DUE_STATES).update(
        state=JobState.CANCELLED, finished_at=timezone.now(), lease_expires_at=None
    )
    job = _get(job_id)
    if not moved and job.state != JobState.CANCELLED:
        raise JobInputError(ERR_CANCEL_STATE.format(job_id=job_id, state=job.state))
    return job


def job_retry(*, job_id: int, run_at: dt.datetime | None = None) -> Job:
    """dead|lost|cancelled|failed → scheduled at `run_at` (default now), with one more
    attempt allowed than it has used."""
    when = _validated_run_at(run_at) if run_at is not None else timezone.now()
    job = _get(job_id)
    retryable = [JobState.DEAD, JobState.LOST, JobState.CANCELLED, JobState.FAILED]
    moved = Job.objects.filter(id=job_id, state__in=retryable, state__exact=job.state).update(
        state=JobState.SCHEDULED,
        run_at=when,
        finished_at=None,
        claimed_by="",
        lease_expires_at=None,
        max_attempts=max(job.max_attempts, job.attempts + 1),
    )
    if not moved:
        raise JobInputError(ERR_RETRY_STATE.format(job_id=job_id, state=_get(job_id).state))
    return _get(job_id)


def job_run_now(*, job_id: int) -> Job:
    """Move the run time of a waiting (scheduled|failed) job to now; its state stays.
    The jobs table's trigger tells the dispatchers at once."""
    moved = Job.objects.filter(id=job_id, state__in=DUE_STATES).update(run_at=timezone.now())
    job = _get(job_id)
    if not moved:
        raise JobInputError(ERR_RUN_NOW_STATE.format(job_id=job_id, state=job.state))
    return job
