"""How an attempt ends, recorded: its success (with its batch's, in one statement), its
failure (with the error, the traceback and the retry policy's decision), a cancel or a
snooze. Every record is fenced by the job's token: a process that lost its lease records
nothing, and whatever goes wrong here stays with that one job."""

from __future__ import annotations

import logging
import sys
import time
import traceback
from enum import Enum, auto
from typing import Any

from celery.exceptions import WorkerShutdown, WorkerTerminate
from django.db import DataError, IntegrityError, InterfaceError, OperationalError

from tasksapp.engine import retry
from tasksapp.engine.db import tempo_connection
from tasksapp.engine.handlers import HandlerError, JobCancelled, Snooze
from tasksapp.engine.jsonvalues import safe_text
from tasksapp.engine.transitions import (
    TRACEBACK_MAX_CHARS,
    StartedJob,
    job_cancel_running,
    job_fail,
    job_snooze,
    job_succeed,
    traceback_tail,
)

log = logging.getLogger(__name__)

ERR_RESULT = "handler returned a result that cannot be stored: {reason}"
ERR_RESULT_NOT_STORED = "the result could not be stored: {reason}"
ERR_TIME_LIMIT = "time limit of {limit:g} s exceeded ({elapsed:.1f} s)"
ERR_UNREADABLE = "{kind} (its message could not be read)"
ERROR_TEXT_CHARS = 2000
TRACEBACK_FRAMES = 50  # of a failed attempt's traceback, the innermost kept
STACK_AT_LIMIT = "Stack at the time limit (most recent call last):\n"
# Raised into the worker by Celery's own signal handlers (a cold shutdown): the attempt
# is recorded as failed and the exception goes on, so the worker still stops.
WORKER_EXITS = (WorkerShutdown, WorkerTerminate)
RECONNECT_PAUSES = (0.25, 0.5, 1.0, 2.0)  # seconds between tries to record successes


class LeaseLost(Exception):
    """The job's fencing token no longer matches: another process owns it now."""


class TimeLimitExceeded(Exception):
    pass


class RunOutcome(Enum):
    """What is left to do after running one job's handler."""

    RECORDED_SUCCESS = auto()  # transactional: the success committed with its effects
    SUCCESS_TO_RECORD = auto()  # recorded with the batch's other successes, in one statement
    FAILED = auto()  # its failure is recorded, or its lease was lost and the outcome dropped
    STOPPED = auto()  # cancelled or snoozed, as the handler (or an operator) asked


def succeed_reconnecting(outcomes: list, *, worker: str, within: float) -> set[int]:
    """job_succeed, tried again on a new connection while the database is away (a
    restart) for at most `within` seconds (the lease): handlers that ran are recorded as
    such, not left to expire into a re-run (at least once) or `lost` (at most once).
    The update is fenced by each job's token, so a try that did commit before the
    connection broke makes the next one a no-op."""
    deadline, pauses = time.monotonic() + within, iter(RECONNECT_PAUSES)
    while True:
        try:
            return job_succeed(outcomes=outcomes, worker=worker)
        except (OperationalError, InterfaceError):
            pause = next(pauses, None)
            if pause is None or time.monotonic() + pause > deadline:
                raise
            log.warning("recording %s successes failed: reconnecting in %s s", len(outcomes), pause)
            tempo_connection().close()
            time.sleep(pause)


def record_successes(
    outcomes: list, jobs: dict[int, StartedJob], *, worker: str, within: float
) -> set[int]:
    """The batch's successes in one statement; if the data of one of them is refused, each
    on its own, and the refused one fails (its outcome alone, never its neighbours')."""
    try:
        return succeed_reconnecting(outcomes, worker=worker, within=within)
    except (DataError, IntegrityError):
        log.warning("a batch's successes were refused as one; recording them one by one")
    done: set[int] = set()
    for outcome in outcomes:
        job = jobs[outcome[0]]
        try:
            done |= job_succeed(outcomes=[outcome], worker=worker)
        except (DataError, IntegrityError) as exc:
            error = ERR_RESULT_NOT_STORED.format(reason=describe(exc))
            record_failure(job, error, kind="exception", began_ms=outcome[3])
    return done


def settle(job: StartedJob, exc: BaseException, began_ms: float | None) -> RunOutcome:
    """Record how an attempt that did not succeed ended (each record token-fenced)."""
    if isinstance(exc, LeaseLost):
        log.warning("job %s: lease lost while running; its outcome is discarded", job.id)
        return RunOutcome.FAILED
    if isinstance(exc, JobCancelled):
        fenced = {"job_id": job.id, "token": job.token, "began_ms": began_ms}
        record_stop(job_cancel_running, **fenced, reason=safe_text(str(exc), max_chars=500))
        return RunOutcome.STOPPED
    if isinstance(exc, Snooze):
        record_stop(job_snooze, job_id=job.id, token=job.token, delay=exc.seconds)
        return RunOutcome.STOPPED
    trace = None
    if isinstance(exc, TimeLimitExceeded):
        error, kind = str(exc), "time_limit"
    elif isinstance(exc, HandlerError):
        error, kind = str(exc), "handler"
    else:
        error, kind, trace = describe(exc), "exception", traceback_of(exc)
    log.warning("job %s: attempt %s failed: %s%s", job.id, job.attempt, error, logged(trace))
    record_failure(job, error, kind=kind, began_ms=began_ms, trace=trace)
    return RunOutcome.FAILED


def traceback_of(exc: BaseException) -> str | None:
    """The exception's traceback (its chained ones too), each of its last
    TRACEBACK_FRAMES frames, storable; None if it cannot be formatted."""
    try:
        lines = traceback.format_exception(exc, limit=-TRACEBACK_FRAMES)
    except Exception:  # noqa: BLE001 - a hostile exception: its error entry says enough
        return None
    return safe_text(traceback_tail("".join(lines)), max_chars=TRACEBACK_MAX_CHARS)


def stack_of(thread: int | None) -> str | None:
    """Where a handler's thread is now (its innermost TRACEBACK_FRAMES frames), as the
    traceback of an attempt ended at its time limit; None if the thread has ended."""
    frame = None if thread is None else sys._current_frames().get(thread)
    if frame is None:
        return None
    lines = traceback.format_stack(frame, limit=TRACEBACK_FRAMES)
    text = STACK_AT_LIMIT + "".join(lines)
    return safe_text(traceback_tail(text), max_chars=TRACEBACK_MAX_CHARS)


def logged(trace: str | None) -> str:
    return "" if trace is None else "\n" + trace.rstrip("\n")


def describe(exc: BaseException) -> str:
    """'Type: message', storable whatever the exception's message holds (or raises)."""
    kind = type(exc).__name__
    try:
        text = f"{kind}: {exc}"
    except Exception:  # noqa: BLE001 - a hostile __str__
        text = ERR_UNREADABLE.format(kind=kind)
    return safe_text(text, max_chars=ERROR_TEXT_CHARS)


def record_stop(transition, **fenced: Any) -> None:
    """Record a cancel or a snooze (token-fenced); a lost lease leaves it to the reaper."""
    try:
        recorded = transition(**fenced)
    except (DataError, IntegrityError):
        name = transition.__name__
        log.exception("job %s: %s not recorded; its lease will expire", fenced["job_id"], name)
        return
    if not recorded:
        log.warning("job %s: %s not recorded, lease lost", fenced["job_id"], transition.__name__)


def record_failure(
    job: StartedJob,
    error: str,
    *,
    kind: str,
    began_ms: float | None,
    min_retry_in: float = 0.0,
    trace: str | None = None,
) -> None:
    """Record one failed attempt (with its traceback, if any). Whatever goes wrong here
    stays with this job: it is logged, and the job's lease, no longer renewed, expires
    into the reaper's hands."""
    try:
        decision = retry.decide(
            job.retry_policy, attempt=job.attempt, max_attempts=job.max_attempts
        )
        recorded = job_fail(
            job_id=job.id,
            token=job.token,
            error=safe_text(error, max_chars=ERROR_TEXT_CHARS),
            kind=kind,
            retry_in=max(decision.delay, min_retry_in) if decision.retry else None,
            began_ms=began_ms,
            traceback=trace,
        )
    except (DataError, IntegrityError, ValueError, OverflowError):
        log.exception("job %s: its failure could not be recorded; its lease will expire", job.id)
        return
    if not recorded:
        log.warning("job %s: failure not recorded, lease lost", job.id)
