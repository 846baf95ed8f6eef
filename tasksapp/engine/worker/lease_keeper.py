"""The lease keeper: one per worker process. It renews the leases of the jobs the process
holds and writes its heartbeat (a thread), writes the deferred starts of jobs still
running when they come due, and acts at each handler's time limit (a watchdog thread).
Each held job is in one Phase at a time; the threads read and change it under one lock."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from enum import Enum, auto

from django.db import close_old_connections
from django.db.models import F
from django.utils import timezone

from tasksapp.engine.cluster import cluster
from tasksapp.engine.db import tempo_connection
from tasksapp.engine.models import WorkerProcess
from tasksapp.engine.settings import tempo_settings
from tasksapp.engine.transitions import (
    StartedJob,
    job_prune_held,
    job_release,
    job_renew,
    job_start_held,
    job_succeed,
)
from tasksapp.engine.worker.outcomes import logged, record_failure, stack_of

log = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Phase(Enum):
    """Where a held job's handler is."""

    WAITING = auto()  # started, its handler not begun (waiting for its run time or turn)
    RUNNING = auto()  # the handler runs: its time limit counts from its begin
    RETURNED = auto()  # it returned (or raised): its outcome is being recorded
    UNCOMMITTED = auto()  # it returned inside a group whose transaction has not committed
    OVERDUE = auto()  # it passed its time limit: its failure recorded, its lease left to end


@dataclasses.dataclass
class HeldJob:
    """A started job this process holds: its lease is renewed until its handler ends or
    passes its time limit."""

    job: StartedJob
    limit: float  # seconds from the handler's begin: the job's own or the default
    phase: Phase = Phase.WAITING
    deadline: float = float("inf")  # time.monotonic() of the limit, while RUNNING
    began_ms: float | None = None  # the database clock's bound at the handler's begin
    thread: int | None = None  # the thread that runs its handler, once it began
    outcome: tuple | None = None  # a success still to be recorded with the batch
    cancel: threading.Event = dataclasses.field(default_factory=threading.Event)
    # time.monotonic() by which a deferred start is written if the job is still held;
    # None: its start is written.
    start_due: float | None = None

    def begin(self, now: float, began_ms: float | None, thread: int) -> None:
        self.phase, self.began_ms, self.thread = Phase.RUNNING, began_ms, thread
        self.deadline = now + self.limit

    def end(self, outcome: tuple | None, *, uncommitted: bool) -> None:
        """The handler returned; an overdue job stays overdue (its failure is recorded)."""
        self.outcome, self.deadline = outcome, float("inf")
        if self.phase is not Phase.OVERDUE:
            self.phase = Phase.UNCOMMITTED if uncommitted else Phase.RETURNED

    def overdue_at(self, now: float) -> bool:
        return self.phase is Phase.RUNNING and self.deadline <= now

    def pass_limit(self) -> None:
        self.phase, self.deadline = Phase.OVERDUE, float("inf")

    def renewable(self, now: float, stuck_threads: set[int | None]) -> bool:
        """Whether its lease is renewed: its start written, within its limit, and not
        waiting for the commit of a thread stuck in an overdue handler (it may never
        come)."""
        if self.start_due is not None or self.phase is Phase.OVERDUE:
            return False  # a deferred start: its claim holds it meanwhile
        if self.phase is Phase.RUNNING and self.deadline <= now:
            return False
        return not (self.phase is Phase.UNCOMMITTED and self.thread in stuck_threads)


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


class SlowestHandler:
    """The slowest handler of this process in its last two heartbeats, for dispatchers
    to pack jobs spread in time into one message (dispatcher/messages.py): reported at each
    beat, the last figure kept while no job runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current = self._previous = self._reported = None

    def ran(self, elapsed_ms: float) -> None:
        with self._lock:
            self._current = max(self._current or 0.0, elapsed_ms)

    def take(self) -> float | None:
        """The figure for this beat; a new period begins."""
        with self._lock:
            seen = [ms for ms in (self._previous, self._current) if ms is not None]
            if seen:
                self._reported = max(seen)
            self._previous, self._current = self._current, None
            return self._reported


class LeaseKeeper:
    """One per process: renews the leases of running jobs and writes a heartbeat; a
    watchdog thread acts at each handler's time limit."""

    def __init__(self) -> None:
        self.settings = tempo_settings()
        self.ttl = self.settings.run_lease_seconds
        self.name = worker_name()
        self.ends_process = _ends_process
        self._held: dict[int, HeldJob] = {}
        self._lock = threading.Lock()
        self._limits = threading.Condition(self._lock)
        self._next_limit = float("inf")  # when the watchdog wakes next (monotonic)
        self._counts = {"succeeded": 0, "failed": 0}
        self.queues: list[str] = []  # the Tempo queues this worker consumes, for the dashboard
        self.slowest = SlowestHandler()
        # Taken before the first job starts: from then on a death is seen at once
        # (liveness.py); not here, where the queues it serves are not known yet.
        self.liveness = cluster().liveness_lock(self.name, self.settings)
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
        """Whether this process's starts (but for at-most-once jobs) may wait: only while
        its liveness lock is held (a dispatcher sees its death at once and counts their
        attempts)."""
        return (
            self.settings.deferred_start_seconds > 0
            and self.liveness is not None
            and self.liveness.held
        )

    def hold(self, job: StartedJob) -> None:
        held = HeldJob(job, time_limit_of(job))
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
            held.begin(time.monotonic(), began_ms, threading.get_ident())
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
                held.end(outcome, uncommitted=uncommitted)

    def release(self, job_id: int, *, ended: str | None) -> None:
        """The job is no longer held; `ended` ("succeeded" or "failed") counts it on the
        worker's row, None (cancelled or snoozed as asked) counts it as neither."""
        with self._lock:
            self._held.pop(job_id, None)
            if ended is not None:
                self._counts[ended] += 1

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
                    tempo_connection().close()
        finally:
            tempo_connection().close()

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
            stuck = {h.thread for h in self._held.values() if h.phase is Phase.OVERDUE}
            leases = [(i, h.job.token) for i, h in self._held.items() if h.renewable(now, stuck)]
            running, counts = len(self._held), dict(self._counts)
            self._counts = {"succeeded": 0, "failed": 0}
            # The prune keeps the jobs still claimed, those whose start is still deferred:
            # only their record is left for a later beat to prune.
            prune = self._may_record_held and self.liveness is not None
            if prune:
                self._may_record_held = any(h.start_due is not None for h in self._held.values())
        slowest_ms = self.slowest.take()
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
            slowest_handler_ms=slowest_ms,
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
                slowest_handler_ms=slowest_ms,
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
                    self._next_limit = min(
                        (h.deadline for h in self._held.values()), default=float("inf")
                    )
                    overdue = [h for h in self._held.values() if h.overdue_at(now)]
                    if not overdue:
                        no_limit = self._next_limit == float("inf")
                        self._limits.wait(None if no_limit else self._next_limit - now)
                        continue
                    for held in overdue:
                        held.pass_limit()
                try:
                    self._time_limit_passed(overdue)
                except Exception:  # the database is down: the leases expire instead
                    log.exception("time limit: the failure could not be recorded")
                    close_old_connections()
                    tempo_connection().close()
                    if self.ends_process:
                        os._exit(TIME_LIMIT_EXIT_CODE)
        finally:
            tempo_connection().close()

    def _time_limit_passed(self, overdue: list[HeldJob]) -> None:
        """Record each overdue attempt as failed (its lease is renewed no more). A prefork
        child then ends: it first records the successes still waiting for their batch and
        hands back the jobs whose handlers never began; other handlers running beside
        (batch parallelism) are left to their leases, as after a crash."""
        template = ERR_TIME_LIMIT_ENDED if self.ends_process else ERR_TIME_LIMIT_STUCK
        margin = TIME_LIMIT_RETRY_MARGIN_S if self.ends_process else 0.0
        for held in overdue:
            self.slowest.ran(held.limit * 1000)  # at least: its handler has not returned
            stack = stack_of(held.thread)
            log.error(
                "job %s: time limit of %g s exceeded%s", held.job.id, held.limit, logged(stack)
            )
            record_failure(
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
            others = [h for h in self._held.values() if h.phase is not Phase.OVERDUE]
            self._held.clear()
        successes = [h.outcome for h in others if h.outcome is not None]
        unbegun = [(h.job.id, h.job.token) for h in others if h.phase is Phase.WAITING]
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
