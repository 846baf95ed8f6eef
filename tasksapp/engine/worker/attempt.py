"""One attempt of one job: wait for its run time by the database clock, call its handler
with its context (its time limit watched by the lease keeper), and — transactional —
record its success in the transaction of its effects."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.handlers import (
    JobCancelled,
    JobContext,
    resolve_handler,
    run_before_handler_checks,
)
from tasksapp.engine.jsonvalues import JsonValueError, checked_json
from tasksapp.engine.models import Delivery
from tasksapp.engine.settings import tempo_settings
from tasksapp.engine.transitions import StartedJob, job_succeed
from tasksapp.engine.worker.lease_keeper import LeaseKeeper, time_limit_of
from tasksapp.engine.worker.outcomes import (
    ERR_RESULT,
    ERR_TIME_LIMIT,
    WORKER_EXITS,
    LeaseLost,
    RunOutcome,
    TimeLimitExceeded,
    settle,
)
from tasksapp.engine.worker.start_rate import start_rates


def nothing() -> None:
    pass


def begin(job: StartedJob) -> float:
    """Wait until the job's run time by the database clock, and, in a rate-limited queue,
    for a start its rate allows; return that clock's time now (ms, a lower bound): when
    the handler began."""
    delay = job.begins_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    start_rates.wait_for_start(job.queue)
    return job.clock.at_least_ms()


def context(job: StartedJob, cancel: threading.Event) -> JobContext:
    return JobContext(
        job_id=job.id,
        payload=job.payload,
        attempt=job.attempt,
        idempotency_key=job.idempotency_key,
        run_at=job.run_at,
        delivery=job.delivery,
        max_attempts=job.max_attempts,
        cancel_event=cancel,
    )


def run_one(
    job: StartedJob, keeper: LeaseKeeper, handler_returned: Callable[[], None] = nothing
) -> tuple[RunOutcome, Any]:
    """Run one job: (RECORDED_SUCCESS | FAILED | STOPPED, None), or
    (SUCCESS_TO_RECORD, outcome) for a success still to be recorded with the batch."""
    began_ms = None
    try:
        refuse_if_cancelled(job)
        handler = resolve_handler(job.handler)
        began_ms = begin(job)
        if job.delivery == Delivery.TRANSACTIONAL:
            run_transactional(job, handler, began_ms, keeper, handler_returned)
            return RunOutcome.RECORDED_SUCCESS, None
        outcome = (job.id, job.token, call(job, handler, began_ms, keeper), began_ms)
        keeper.returned(job.id, outcome)
        return RunOutcome.SUCCESS_TO_RECORD, outcome
    except BaseException as exc:  # noqa: BLE001 - the handler's own failure, SystemExit too
        status = settle(job, exc, began_ms)
        if isinstance(exc, WORKER_EXITS):
            raise
        return status, None


def refuse_if_cancelled(job: StartedJob) -> None:
    if job.cancel_requested:  # cancelled between its claim and its start
        raise JobCancelled(f"job {job.id} was cancelled before it began")


def call(
    job: StartedJob, handler, began_ms: float, keeper: LeaseKeeper, *, uncommitted: bool = False
) -> Any:
    keeper.began(job.id, began_ms)
    began = time.monotonic()
    ctx = context(job, keeper.cancel_event(job.id))
    try:
        run_before_handler_checks(ctx)
        result = handler(ctx)
    finally:
        keeper.returned(job.id, uncommitted=uncommitted)
        elapsed = time.monotonic() - began
        keeper.slowest.ran(elapsed * 1000)  # failed or not, it held its slot so long
    limit = time_limit_of(job)
    if elapsed > limit:
        raise TimeLimitExceeded(ERR_TIME_LIMIT.format(limit=limit, elapsed=elapsed))
    limits = tempo_settings()
    try:
        return checked_json(
            result,
            what="result",
            max_bytes=limits.max_result_bytes,
            max_depth=limits.max_json_depth,
        )
    except JsonValueError as exc:
        raise ValueError(ERR_RESULT.format(reason=exc)) from exc


def run_transactional(
    job: StartedJob,
    handler,
    began_ms: float,
    keeper: LeaseKeeper,
    handler_returned: Callable[[], None],
) -> None:
    with tempo_atomic():
        result = call(job, handler, began_ms, keeper)
        handler_returned()
        if not job_succeed(outcomes=[(job.id, job.token, result, began_ms)], worker=keeper.name):
            raise LeaseLost(job.id)
