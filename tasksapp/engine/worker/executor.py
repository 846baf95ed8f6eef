"""The worker side: start a batch of claimed jobs, run their handlers, finish them.

Delivery modes:
- transactional: the handler runs inside the transaction that marks the job succeeded;
  if the fenced success update finds the lease lost, everything rolls back. The
  transactional jobs of a batch share one transaction, each in a savepoint of its own
  (see `_run_group`).
- at_least_once / at_most_once: the handler runs outside a transaction; successes are
  recorded in one batched statement at the end of the batch.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import Enum, auto
from queue import Empty, SimpleQueue
from typing import Any

from celery.exceptions import WorkerShutdown, WorkerTerminate
from django.db import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import F
from django.utils import timezone

from tasksapp.engine import retry
from tasksapp.engine.handlers import (
    HandlerError,
    JobCancelled,
    JobContext,
    Snooze,
    owns_transaction,
    resolve_handler,
)
from tasksapp.engine.jsonvalues import JsonValueError, checked_json, safe_text
from tasksapp.engine.models import Delivery, WorkerProcess
from tasksapp.engine.sessions import flush_commits
from tasksapp.engine.settings import tempo_settings
from tasksapp.engine.store.pg_session import transaction_aborted
from tasksapp.engine.transitions import (
    TRACEBACK_MAX_CHARS,
    StartedJob,
    job_cancel_running,
    job_fail,
    job_prune_held,
    job_release,
    job_renew,
    job_snooze,
    job_start,
    job_start_held,
    job_succeed,
    traceback_tail,
)
from tasksapp.engine.worker.clock import tightened
from tasksapp.engine.worker.liveness import (
    LivenessLock,
    liveness_lock_possible,
    watches_peers,
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


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclasses.dataclass
class _Held:
    """A started job this process holds: its lease is renewed until its handler ends or
    passes its time limit."""

    job: StartedJob
    limit: float  # seconds from the handler's begin: the job's own or the default
    deadline: float | None = None  # time.monotonic() of the limit, once the handler began
    began: bool = False
    began_ms: float | None = None
    overdue: bool = False  # past its limit: no longer renewed
    outcome: tuple | None = None  # a success still to be recorded with the batch
    thread: int | None = None  # the thread that runs its handler
    uncommitted: bool = False  # returned, its success waiting for its group's commit
    cancel: threading.Event = dataclasses.field(default_factory=threading.Event)
    # time.monotonic() by which a deferred start is written if the job is still held;
    # None: its start is written.
    start_due: float | None = None


def time_limit_of(job: StartedJob) -> float:
    """The job's time limit, or the default one: every attempt has a limit."""
    return job.time_limit or tempo_settings().default_time_limit_seconds


def end_processes_at_time_limit() -> None:
    """Called in each prefork child as it starts: a handler past its time limit ends the
    child (Celery's pool starts another), since a running thread cannot be stopped."""
    global _ends_process
    _ends_process = True


_ends_process = False
TIME_LIMIT_EXIT_CODE = 70
# A time limit's failed attempt is due again no sooner than this: the process running
# the handler ends within microseconds of recording it, long before any new claim.
TIME_LIMIT_RETRY_MARGIN_S = 1.0
ERR_TIME_LIMIT_ENDED = (
    "time limit of {limit:g} s exceeded: the handler was still running; its worker process "
    "was ended"
)
ERR_TIME_LIMIT_STUCK = (
    "time limit of {limit:g} s exceeded: the handler was still running (a thread cannot be "
    "stopped; run workers with -P prefork to end it)"
)


START_RETRY_PAUSE_S = 0.25  # a deferred start the database refused is tried again after


class LeaseKeeper:
    """One per process: renews the leases of running jobs and writes a heartbeat; a
    watchdog thread acts at each handler's time limit."""

    def __init__(self) -> None:
        self.settings = tempo_settings()
        self.ttl = self.settings.run_lease_seconds
        self.name = worker_name()
        self.ends_process = _ends_process
        self._held: dict[int, _Held] = {}
        self._lock = threading.Lock()
        self._limits = threading.Condition(self._lock)
        self._next_limit = float("inf")  # when the watchdog wakes next (monotonic)
        self._counts = {"succeeded": 0, "failed": 0}
        self.queues: list[str] = []  # the Tempo queues this worker consumes, for the dashboard
        # Taken before the first job starts: from then on a death is seen at once
        # (liveness.py); not here, where the queues it serves are not known yet.
        self.liveness = (
            LivenessLock(self.name, watch_peers=watches_peers(self.settings))
            if liveness_lock_possible(self.settings)
            else None
        )
        self._stopped = threading.Event()
        self._wake = threading.Event()  # a deferred start now due sooner than the next beat
        self._next_wake = float("inf")
        # Whether this process's row may still record deferred starts (held jobs) that
        # the next beat should prune: none deferred since the record was last emptied.
        self._may_record_held = True  # a row left by an earlier process of this name
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
        self._thread.start()
        self._watchdog = threading.Thread(target=self._watch, name="time-limits", daemon=True)
        self._watchdog.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        with self._lock:
            self._limits.notify()
        self._thread.join(timeout=5)
        self._watchdog.join(timeout=5)
        if self.liveness is not None:
            self.liveness.close()

    def defers_starts(self) -> bool:
        """Whether this process's at-least-once starts may wait: only while its liveness
        lock is held (a dispatcher sees its death at once and counts their attempts)."""
        return (
            self.settings.deferred_start_seconds > 0
            and self.liveness is not None
            and self.liveness.held
        )

    def hold(self, job: StartedJob) -> None:
        held = _Held(job, time_limit_of(job))
        if job.cancel_requested:
            held.cancel.set()
        wake = False
        with self._lock:
            self._held[job.id] = held
            if not job.start_written:
                self._may_record_held = True
                held.start_due = time.monotonic() + self.settings.deferred_start_seconds
                wake = held.start_due < self._next_wake
                self._next_wake = min(self._next_wake, held.start_due)
        if wake:
            self._wake.set()

    def cancel_event(self, job_id: int) -> threading.Event:
        """Set once an operator asks to cancel the job (the handler's ctx reads it)."""
        with self._lock:
            held = self._held.get(job_id)
        return held.cancel if held is not None else threading.Event()

    def began(self, job_id: int, began_ms: float | None) -> None:
        """The handler begins now: its time limit runs from here."""
        with self._lock:
            held = self._held.get(job_id)
            if held is None:
                return
            held.began, held.began_ms = True, began_ms
            held.thread = threading.get_ident()
            held.deadline = time.monotonic() + held.limit
            if held.deadline < self._next_limit:
                self._next_limit = held.deadline
                self._limits.notify()

    def returned(
        self, job_id: int, outcome: tuple | None = None, *, uncommitted: bool = False
    ) -> None:
        """The handler returned (or raised): nothing left to stop; a success still to be
        recorded with its batch is kept here, so that a process ending early records it.
        `uncommitted`: its effects wait in a transaction its thread has not committed."""
        with self._lock:
            held = self._held.get(job_id)
            if held is not None:
                held.deadline, held.outcome, held.uncommitted = None, outcome, uncommitted

    def release(self, job_id: int, *, succeeded: bool) -> None:
        with self._lock:
            self._held.pop(job_id, None)
            self._counts["succeeded" if succeeded else "failed"] += 1

    def forget(self, job_ids: Sequence[int]) -> None:
        with self._lock:
            for job_id in job_ids:
                self._held.pop(job_id, None)

    def _loop(self) -> None:
        """Every third of the lease: renew and beat; in between, at the moment one is due,
        write the deferred starts of jobs still running."""
        beat_at = time.monotonic() + self.ttl / 3
        try:
            while not self._stopped.is_set():
                with self._lock:
                    wake_at = min(beat_at, self._next_wake)
                self._wake.wait(max(0.0, wake_at - time.monotonic()))
                self._wake.clear()
                if self._stopped.is_set():
                    break
                try:
                    self._write_due_starts()
                    if time.monotonic() >= beat_at:
                        beat_at = time.monotonic() + self.ttl / 3
                        self._renew_and_beat()
                except Exception:  # database down: keep trying; leases may expire meanwhile
                    log.exception("lease renewal failed")
                    close_old_connections()
                    connection.close()
        finally:
            connection.close()

    def _write_due_starts(self) -> None:
        """The deferred starts due now, of jobs this process still holds."""
        now = time.monotonic()
        with self._lock:
            due = [h for h in self._held.values() if h.start_due is not None and h.start_due <= now]
            for held in due:
                held.start_due = None
            self._next_wake = min(
                (h.start_due for h in self._held.values() if h.start_due is not None),
                default=float("inf"),
            )
            began = [(h.job.id, h.job.token, h.began_ms) for h in due]
        if not began:
            return
        try:
            started = job_start_held(began=began, worker=self.name, ttl=self.ttl)
        except Exception:
            with self._lock:  # tried again in a moment, while the claim holds
                for held in due:
                    held.start_due = now + START_RETRY_PAUSE_S
                self._next_wake = min(self._next_wake, now + START_RETRY_PAUSE_S)
            raise
        self._signal_cancels(started.cancel_requested)

    def _renew_and_beat(self) -> None:
        if self.liveness is not None:
            self.liveness.ensure(self.queues)  # taken again if its session was lost
        now = time.monotonic()
        with self._lock:
            # Past its time limit a job's lease is no longer renewed, nor are those of the
            # jobs waiting for a commit on the same thread: it may never come.
            stuck = {h.thread for h in self._held.values() if h.overdue}
            leases = [
                (i, h.job.token)
                for i, h in self._held.items()
                if h.start_due is None  # a deferred start: its claim holds it meanwhile
                and not h.overdue
                and (h.deadline is None or h.deadline > now)
                and not (h.uncommitted and h.thread in stuck)
            ]
            running, counts = len(self._held), dict(self._counts)
            self._counts = {"succeeded": 0, "failed": 0}
            # The prune keeps the jobs still claimed, those whose start is still deferred:
            # only their record is left for a later beat to prune.
            prune = self._may_record_held and self.liveness is not None
            if prune:
                self._may_record_held = any(h.start_due is not None for h in self._held.values())
        renewed = job_renew(leases=leases, ttl=self.ttl)
        self._signal_cancels(renewed.cancel_requested)
        if prune:
            try:
                job_prune_held(worker=self.name)
            except Exception:
                self._may_record_held = True  # tried again at the next beat
                raise
        updated = WorkerProcess.objects.filter(name=self.name).update(
            heartbeat_at=timezone.now(),
            running=running,
            succeeded=F("succeeded") + counts["succeeded"],
            failed=F("failed") + counts["failed"],
            queues=self.queues,
        )
        if not updated:
            WorkerProcess.objects.create(
                name=self.name,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                running=running,
                succeeded=counts["succeeded"],
                failed=counts["failed"],
                queues=self.queues,
            )

    def _signal_cancels(self, job_ids: frozenset[int]) -> None:
        """Tell the handlers of jobs an operator cancelled (ctx.cancel_requested)."""
        with self._lock:
            for job_id in job_ids:
                held = self._held.get(job_id)
                if held is not None and not held.cancel.is_set():
                    log.info("job %s: cancel requested", job_id)
                    held.cancel.set()

    def _watch(self) -> None:
        """Wake at the earliest time limit of a running handler, and act on it."""
        try:
            while not self._stopped.is_set():
                with self._lock:
                    now = time.monotonic()
                    deadlines = [h.deadline for h in self._held.values() if h.deadline is not None]
                    self._next_limit = min(deadlines, default=float("inf"))
                    overdue = [h for h in self._held.values() if h.deadline and h.deadline <= now]
                    if not overdue:
                        wait = None if not deadlines else self._next_limit - now
                        self._limits.wait(wait)
                        continue
                    for held in overdue:
                        held.deadline, held.overdue = None, True
                try:
                    self._time_limit_passed(overdue)
                except Exception:  # the database is down: the leases expire instead
                    log.exception("time limit: the failure could not be recorded")
                    close_old_connections()
                    connection.close()
                    if self.ends_process:
                        os._exit(TIME_LIMIT_EXIT_CODE)
        finally:
            connection.close()

    def _time_limit_passed(self, overdue: list[_Held]) -> None:
        """Record each overdue attempt as failed (its lease is renewed no more). A prefork
        child then ends: it first records the successes still waiting for their batch and
        hands back the jobs whose handlers never began; other handlers running beside
        (batch parallelism) are left to their leases, as after a crash."""
        template = ERR_TIME_LIMIT_ENDED if self.ends_process else ERR_TIME_LIMIT_STUCK
        margin = TIME_LIMIT_RETRY_MARGIN_S if self.ends_process else 0.0
        for held in overdue:
            stack = _stack_of(held.thread)
            log.error(
                "job %s: time limit of %g s exceeded%s", held.job.id, held.limit, _logged(stack)
            )
            _record_failure(
                held.job,
                template.format(limit=held.limit),
                kind="time_limit",
                began_ms=held.began_ms,
                min_retry_in=margin,
                trace=stack,
            )
        if not self.ends_process:
            return
        with self._lock:
            others = [h for h in self._held.values() if not h.overdue]
            self._held.clear()
        successes = [h.outcome for h in others if h.outcome is not None]
        unbegun = [(h.job.id, h.job.token) for h in others if not h.began]
        if successes:
            job_succeed(outcomes=successes, worker=self.name)
        job_release(leases=unbegun)
        log.error(
            "worker process ends at a time limit (%d handed back, %d successes recorded)",
            len(unbegun),
            len(successes),
        )
        logging.shutdown()
        os._exit(TIME_LIMIT_EXIT_CODE)


_keeper: LeaseKeeper | None = None
_keeper_lock = threading.Lock()


def lease_keeper() -> LeaseKeeper:
    global _keeper
    with _keeper_lock:
        if _keeper is None or _keeper.name != worker_name():  # new process after fork
            _keeper = LeaseKeeper()
        return _keeper


def stop_lease_keeper() -> None:
    global _keeper
    with _keeper_lock:
        if _keeper is not None:
            _keeper.stop()
            _keeper = None


def _nothing() -> None:
    pass


def execute_batch(
    claims: Sequence[Sequence[int | float]], *, handlers_returned: Callable[[], None] = _nothing
) -> int:
    """Run a batch of [job id, token, run_at in ms] sent by a dispatcher (the run_at
    there is informational: the start returns each job's own); returns the number of
    jobs started.

    `handlers_returned` is called (perhaps more than once) as soon as every handler of
    the batch has returned, before their outcomes are recorded and committed: the worker
    may take its next message then, so that the next job's message is read from the broker
    while this one's success commits.

    The jobs are started at once, usually some ms before their run time (the dispatcher
    claims ahead to hide the broker hop), and each handler waits for its run_at by the
    database clock as the start's answer bounds it: that round trip and its CPU, a burst
    of workers at once, stay off the path between run_at and the handler."""
    keeper = lease_keeper()
    if keeper.liveness is not None and not keeper.liveness.held:
        keeper.liveness.ensure(keeper.queues)  # first (or lost): the lock, then the jobs
    pairs = [(int(c[0]), int(c[1])) for c in claims]
    started = tightened(
        job_start(
            claims=pairs,
            worker=keeper.name,
            ttl=keeper.ttl,
            # A message of one job starts it as before: its record on the worker's row
            # would cost as much as the write it saves, on a row its other slots share.
            defer_at_least_once=len(pairs) > 1 and keeper.defers_starts(),
        )
    )
    if any(job.delivery == Delivery.AT_MOST_ONCE for job in started):
        flush_commits()  # the start must survive a database crash before the handler runs
    for job in started:
        keeper.hold(job)
    try:
        finished_ok: list[tuple[int, int, Any, float]] = []
        results = _run_all(started, keeper, handlers_returned)
        handlers_returned()
        for job, (status, outcome) in zip(started, results, strict=True):
            if status is RunOutcome.SUCCESS_TO_RECORD:
                finished_ok.append(outcome)
            else:
                keeper.release(job.id, succeeded=status is RunOutcome.RECORDED_SUCCESS)
        jobs = {job.id: job for job in started}
        done = _record_successes(finished_ok, jobs, worker=keeper.name, within=keeper.ttl)
        for job_id, *_ in finished_ok:
            keeper.release(job_id, succeeded=job_id in done)
    finally:
        # An outcome that could not be recorded (the database went away): stop renewing
        # the lease, so that it expires and the reaper returns the job.
        keeper.forget([job.id for job in started])
    return len(started)


RECONNECT_PAUSES = (0.25, 0.5, 1.0, 2.0)  # seconds between tries to record successes


def _succeed_reconnecting(outcomes: list, *, worker: str, within: float) -> set[int]:
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
            connection.close()
            time.sleep(pause)


def _record_successes(
    outcomes: list, jobs: dict[int, StartedJob], *, worker: str, within: float
) -> set[int]:
    """The batch's successes in one statement; if the data of one of them is refused, each
    on its own, and the refused one fails (its outcome alone, never its neighbours')."""
    try:
        return _succeed_reconnecting(outcomes, worker=worker, within=within)
    except (DataError, IntegrityError):
        log.warning("a batch's successes were refused as one; recording them one by one")
    done: set[int] = set()
    for outcome in outcomes:
        job = jobs[outcome[0]]
        try:
            done |= job_succeed(outcomes=[outcome], worker=worker)
        except (DataError, IntegrityError) as exc:
            error = ERR_RESULT_NOT_STORED.format(reason=_describe(exc))
            _record_failure(job, error, kind="exception", began_ms=outcome[3])
    return done


_handler_pool: ThreadPoolExecutor | None = None
_handler_pool_lock = threading.Lock()


def _run_all(
    jobs: list[StartedJob], keeper: LeaseKeeper, handler_returned: Callable[[], None]
) -> list[tuple[RunOutcome, Any]]:
    """Run a batch's handlers: one after another, or, with TEMPO_BATCH_PARALLELISM = N > 1,
    N side by side: the calling thread and N - 1 pool threads shared by the whole process
    (so a `-c 1` worker never runs more than N handlers at once). The calling thread takes
    its share rather than waiting: one thread hand-off fewer between start and handler.
    A job alone calls `handler_returned` once its handler returns, before its commit."""
    parallelism = keeper.settings.batch_parallelism
    results: list[tuple[RunOutcome, Any]] = [(RunOutcome.FAILED, None)] * len(jobs)
    if len(jobs) == 1:  # nothing to share a transaction with: one of its own, no savepoint
        results[0] = _run_one(jobs[0], keeper, handler_returned)
        return results
    if parallelism <= 1 or len(jobs) <= 1:
        pending = iter(enumerate(jobs))
        _run_in_turn(lambda: next(pending, None), keeper, results, pool_thread=False)
        return results
    todo: SimpleQueue[tuple[int, StartedJob]] = SimpleQueue()
    for index, job in enumerate(jobs):
        todo.put((index, job))

    def take() -> tuple[int, StartedJob] | None:
        try:
            return todo.get_nowait()
        except Empty:
            return None

    pool, helpers_wanted = _pool(parallelism), min(len(jobs), parallelism) - 1
    helpers = [
        pool.submit(_run_in_turn, take, keeper, results, pool_thread=True)
        for _ in range(helpers_wanted)
    ]
    try:
        _run_in_turn(take, keeper, results, pool_thread=False)
    finally:
        for helper in helpers:
            helper.result()
    return results


def _run_in_turn(take, keeper: LeaseKeeper, results: list, *, pool_thread: bool) -> None:
    """Run the jobs `take()` hands out as (index in the batch, job) until it hands out
    None, each result at its index: transactional ones in groups (`_run_group`)."""
    item = take()
    while item is not None:
        if pool_thread:
            close_old_connections()  # each pool thread keeps its own healthy connection
        index, job = item
        if _shares_transaction(job):
            item = _run_group(item, take, keeper, results) or take()
        else:
            results[index] = _run_one(job, keeper)
            item = take()


def _pool(parallelism: int) -> ThreadPoolExecutor:
    global _handler_pool
    with _handler_pool_lock:
        if _handler_pool is None:
            _handler_pool = ThreadPoolExecutor(parallelism - 1, thread_name_prefix="handler")
        return _handler_pool


def on_every_pool_thread(pool: ThreadPoolExecutor, action) -> None:
    """Run `action` once on each of the pool's threads (a barrier keeps each to one)."""
    threads = pool._max_workers
    barrier = threading.Barrier(threads)

    def once() -> None:
        action()
        barrier.wait(timeout=10)

    for future in [pool.submit(once) for _ in range(threads)]:
        future.result()


NO_JOB = (-1, -1)  # (id, token) that matches no row: identity ids are positive


def warm_up() -> None:
    """Before the first job, on each thread that will run jobs: open the thread's database
    connection and run the start and finish once for no job (id -1 never exists), so the
    session has parsed and prepared them. A new session pays connecting and a few ms of
    catalog reads the first time it touches a table: on a job's path, 10-20 ms of
    lateness."""
    job_start(claims=[NO_JOB], worker="", ttl=0)
    job_start(claims=[NO_JOB], worker="", ttl=0, defer_at_least_once=True)
    job_succeed(outcomes=[(*NO_JOB, None, None)])


def warm_handler_pool() -> None:
    """Open each handler thread's database connection before the first burst needs it."""
    parallelism = tempo_settings().batch_parallelism
    if parallelism > 1:
        on_every_pool_thread(_pool(parallelism), warm_up)


def stop_handler_pool() -> None:
    global _handler_pool
    with _handler_pool_lock:
        if _handler_pool is not None:
            on_every_pool_thread(_handler_pool, lambda: connection.close())
            _handler_pool.shutdown(wait=True)
            _handler_pool = None


def _begin(job: StartedJob) -> float:
    """Wait until the job's run time by the database clock; return that clock's time now
    (ms, a lower bound): when the handler began."""
    delay = job.begins_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    return job.clock.at_least_ms()


def _context(job: StartedJob, cancel: threading.Event) -> JobContext:
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


def _run_one(
    job: StartedJob, keeper: LeaseKeeper, handler_returned: Callable[[], None] = _nothing
) -> tuple[RunOutcome, Any]:
    """Run one job: (RECORDED_SUCCESS | FAILED | STOPPED, None), or
    (SUCCESS_TO_RECORD, outcome) for a success still to be recorded with the batch."""
    began_ms = None
    try:
        _refuse_if_cancelled(job)
        handler = resolve_handler(job.handler)
        began_ms = _begin(job)
        if job.delivery == Delivery.TRANSACTIONAL:
            _run_transactional(job, handler, began_ms, keeper, handler_returned)
            return RunOutcome.RECORDED_SUCCESS, None
        outcome = (job.id, job.token, _call(job, handler, began_ms, keeper), began_ms)
        keeper.returned(job.id, outcome)
        return RunOutcome.SUCCESS_TO_RECORD, outcome
    except BaseException as exc:  # noqa: BLE001 - the handler's own failure, SystemExit too
        status = _settle(job, exc, began_ms)
        if isinstance(exc, WORKER_EXITS):
            raise
        return status, None


def _refuse_if_cancelled(job: StartedJob) -> None:
    if job.cancel_requested:  # cancelled between its claim and its start
        raise JobCancelled(f"job {job.id} was cancelled before it began")


def _settle(job: StartedJob, exc: BaseException, began_ms: float | None) -> RunOutcome:
    """Record how an attempt that did not succeed ended (each record token-fenced)."""
    if isinstance(exc, LeaseLost):
        log.warning("job %s: lease lost while running; its outcome is discarded", job.id)
        return RunOutcome.FAILED
    if isinstance(exc, JobCancelled):
        _record_stop(job_cancel_running, job_id=job.id, token=job.token, began_ms=began_ms)
        return RunOutcome.STOPPED
    if isinstance(exc, Snooze):
        _record_stop(job_snooze, job_id=job.id, token=job.token, delay=exc.seconds)
        return RunOutcome.STOPPED
    trace = None
    if isinstance(exc, TimeLimitExceeded):
        error, kind = str(exc), "time_limit"
    elif isinstance(exc, HandlerError):
        error, kind = str(exc), "handler"
    else:
        error, kind, trace = _describe(exc), "exception", _traceback_of(exc)
    log.warning("job %s: attempt %s failed: %s%s", job.id, job.attempt, error, _logged(trace))
    _record_failure(job, error, kind=kind, began_ms=began_ms, trace=trace)
    return RunOutcome.FAILED


def _traceback_of(exc: BaseException) -> str | None:
    """The exception's traceback (its chained ones too), each of its last
    TRACEBACK_FRAMES frames, storable; None if it cannot be formatted."""
    try:
        lines = traceback.format_exception(exc, limit=-TRACEBACK_FRAMES)
    except Exception:  # noqa: BLE001 - a hostile exception: its error entry says enough
        return None
    return safe_text(traceback_tail("".join(lines)), max_chars=TRACEBACK_MAX_CHARS)


def _stack_of(thread: int | None) -> str | None:
    """Where a handler's thread is now (its innermost TRACEBACK_FRAMES frames), as the
    traceback of an attempt ended at its time limit; None if the thread has ended."""
    frame = None if thread is None else sys._current_frames().get(thread)
    if frame is None:
        return None
    lines = traceback.format_stack(frame, limit=TRACEBACK_FRAMES)
    text = STACK_AT_LIMIT + "".join(lines)
    return safe_text(traceback_tail(text), max_chars=TRACEBACK_MAX_CHARS)


def _logged(trace: str | None) -> str:
    return "" if trace is None else "\n" + trace.rstrip("\n")


def _describe(exc: BaseException) -> str:
    """'Type: message', storable whatever the exception's message holds (or raises)."""
    kind = type(exc).__name__
    try:
        text = f"{kind}: {exc}"
    except Exception:  # noqa: BLE001 - a hostile __str__
        text = ERR_UNREADABLE.format(kind=kind)
    return safe_text(text, max_chars=ERROR_TEXT_CHARS)


def _call(
    job: StartedJob, handler, began_ms: float, keeper: LeaseKeeper, *, uncommitted: bool = False
) -> Any:
    keeper.began(job.id, began_ms)
    began = time.monotonic()
    try:
        result = handler(_context(job, keeper.cancel_event(job.id)))
    finally:
        keeper.returned(job.id, uncommitted=uncommitted)
    elapsed = time.monotonic() - began
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


def _run_transactional(
    job: StartedJob,
    handler,
    began_ms: float,
    keeper: LeaseKeeper,
    handler_returned: Callable[[], None],
) -> None:
    with transaction.atomic():
        result = _call(job, handler, began_ms, keeper)
        handler_returned()
        if not job_succeed(outcomes=[(job.id, job.token, result, began_ms)]):
            raise LeaseLost(job.id)


# --- transactional groups -------------------------------------------------------------
#
# One transaction per job costs two statements per job (its success and the commit); a
# group costs them once for up to TRANSACTION_GROUP_JOBS jobs. Each job's effects sit in a
# savepoint of its own, made before the handler's first statement (a handler that never
# touches the database costs no round trip), so that a job that fails rolls back alone.
# The group is kept short (a time, a count of savepoints) because it holds its jobs' row
# locks and keeps their effects invisible until it commits; the count stays under
# PostgreSQL's 64 cached subtransactions per transaction (more slow every snapshot on the
# server). Jobs whose handlers touched no database cost no savepoint and hold nothing:
# only the time bounds how many of them share a group.

ERR_TRANSACTION_ABORTED = (
    "the handler returned after a database error it caught: its transaction was aborted"
)


class _GroupRefused(Exception):
    """The group's successes cannot all be recorded: its transaction rolls back."""

    def __init__(self, lost: set[int]) -> None:
        super().__init__(f"{len(lost)} of the group's leases were lost")
        self.lost = lost  # jobs another process owns now: their outcomes are dropped


def _shares_transaction(job: StartedJob) -> bool:
    """Whether the job runs in a transaction shared with its batch's next jobs: a
    transactional job on PostgreSQL whose handler does not ask for its own."""
    if job.delivery != Delivery.TRANSACTIONAL or not _on_postgres():
        return False
    return tempo_settings().transaction_group_jobs > 1 and not owns_transaction(job.handler)


@functools.cache
def _on_postgres() -> bool:
    return connection.vendor == "postgresql"


def _run_group(first, take, keeper: LeaseKeeper, results: list) -> tuple | None:
    """Run transactional jobs (`first`, then what `take()` hands out) in one transaction,
    each in its own savepoint, and record their successes in one token-fenced statement
    before the commit. The group ends when TRANSACTION_GROUP_JOBS of its handlers ran
    statements (a job that touched no database holds nothing and is not counted), when
    TRANSACTION_GROUP_MS have passed since its first job finished, or before a job that
    would wait past that or must not share it; returns that job (None if none was taken).

    A failed job's savepoint rolls back alone and its failure commits with the group. If
    a success cannot be recorded (a lease lost: another process owns that job now; a
    result refused) the whole group rolls back, and its jobs still held run again, each
    in a transaction of its own."""
    settings, db = keeper.settings, transaction.get_connection()
    savepoints = _Savepoints(db)
    members: list[tuple[int, StartedJob, RunOutcome, Any]] = []
    item, closes, current = first, float("inf"), first[1]
    try:
        with transaction.atomic(), db.execute_wrapper(savepoints):
            while item is not None and _joins_group(item[1], closes):
                index, current = item
                members.append((index, current, *_run_member(current, keeper, savepoints)))
                closes = min(closes, time.monotonic() + settings.transaction_group_ms / 1000)
                full = savepoints.made >= settings.transaction_group_jobs
                item = None if full or time.monotonic() >= closes else take()
            _record_group_successes(members)
    except _GroupRefused as refused:
        log.warning("a group of %s jobs rolled back (%s)", len(members), refused)
        _run_alone(members, refused.lost, keeper, results)
        return item
    except WORKER_EXITS as exc:  # the group rolled back: the others are left to their leases
        _record_failure(current, _describe(exc), kind="exception", began_ms=None)
        raise
    for index, _, status, _ in members:
        recorded = status is RunOutcome.SUCCESS_TO_RECORD
        results[index] = (RunOutcome.RECORDED_SUCCESS if recorded else status, None)
    return item


def _joins_group(job: StartedJob, closes: float) -> bool:
    return _shares_transaction(job) and job.begins_at <= closes


def _run_member(job: StartedJob, keeper: LeaseKeeper, savepoints) -> tuple[RunOutcome, Any]:
    """One job of a group: (SUCCESS_TO_RECORD, outcome) with its effects kept, or
    (FAILED | STOPPED, None) with its savepoint rolled back and its end recorded."""
    began_ms, callbacks = None, len(savepoints.db.run_on_commit)
    try:
        _refuse_if_cancelled(job)
        handler = resolve_handler(job.handler)
        began_ms = _begin(job)
        savepoints.arm()
        result = _call(job, handler, began_ms, keeper, uncommitted=True)
        savepoints.check_usable()
        savepoints.release()
        return RunOutcome.SUCCESS_TO_RECORD, (job.id, job.token, result, began_ms)
    except BaseException as exc:  # noqa: BLE001 - the handler's own failure, SystemExit too
        savepoints.roll_back()
        del savepoints.db.run_on_commit[callbacks:]  # its on_commit callbacks go with it
        if isinstance(exc, WORKER_EXITS):
            raise
        return _settle_in_group(job, exc, began_ms), None


class _Savepoints:
    """The savepoint of each job of a group, made just before its handler's first
    statement: an execute wrapper on the group's connection, armed while a handler runs."""

    def __init__(self, db) -> None:
        self.db = db
        self.sid: str | None = None
        self.made = 0  # savepoints made: subtransactions of the group's transaction
        self._armed = False

    def arm(self) -> None:
        self.sid, self._armed = None, True

    def __call__(self, execute, sql, params, many, context):
        if self._armed:
            self._armed = False  # the SAVEPOINT statement passes through here too
            self.sid = self.db.savepoint()
            self.made += 1
        return execute(sql, params, many, context)

    def check_usable(self) -> None:
        """A handler that caught a database error and returned leaves its transaction
        aborted: that is its failure (its savepoint rolls back), not its neighbours'."""
        self._armed = False
        ran_statements = self.sid is not None
        if self.db.needs_rollback or (ran_statements and transaction_aborted(self.db)):
            raise DatabaseError(ERR_TRANSACTION_ABORTED)

    def release(self) -> None:
        if self.sid is not None:
            self.db.savepoint_commit(self.sid)

    def roll_back(self) -> None:
        # Without a savepoint the handler ran no statement: the transaction is as it was.
        self._armed, self.db.needs_rollback = False, False
        if self.sid is not None:
            self.db.savepoint_rollback(self.sid)


def _settle_in_group(job: StartedJob, exc: BaseException, began_ms: float | None) -> RunOutcome:
    """`_settle` in the group's transaction, in a savepoint: a record the database refuses
    is logged and the job left to its lease, as outside a group."""
    try:
        with transaction.atomic():
            return _settle(job, exc, began_ms)
    except (DataError, IntegrityError):
        log.exception("job %s: its end could not be recorded; its lease will expire", job.id)
        return RunOutcome.FAILED


def _record_group_successes(members: list[tuple[int, StartedJob, RunOutcome, Any]]) -> None:
    """The group's successes in one statement, fenced by each job's token."""
    outcomes = [
        outcome for *_, status, outcome in members if status is RunOutcome.SUCCESS_TO_RECORD
    ]
    if not outcomes:
        return
    try:
        done = job_succeed(outcomes=outcomes)
    except (DataError, IntegrityError) as exc:
        raise _GroupRefused(set()) from exc
    lost = {outcome[0] for outcome in outcomes} - done
    if lost:
        raise _GroupRefused(lost)


def _run_alone(members: list, lost: set[int], keeper: LeaseKeeper, results: list) -> None:
    """After a group rolled back: its jobs still held run again, each on its own."""
    for index, job, *_ in members:
        if job.id in lost:
            log.warning("job %s: lease lost while running; its outcome is discarded", job.id)
            results[index] = (RunOutcome.FAILED, None)
        else:
            results[index] = _run_one(job, keeper)


def _record_stop(transition, **fenced: Any) -> None:
    """Record a cancel or a snooze (token-fenced); a lost lease leaves it to the reaper."""
    try:
        recorded = transition(**fenced)
    except (DataError, IntegrityError):
        name = transition.__name__
        log.exception("job %s: %s not recorded; its lease will expire", fenced["job_id"], name)
        return
    if not recorded:
        log.warning("job %s: %s not recorded, lease lost", fenced["job_id"], transition.__name__)


def _record_failure(
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
