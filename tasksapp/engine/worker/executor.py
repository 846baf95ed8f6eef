"""The worker side: start a batch of claimed jobs, run their handlers, finish them.

Delivery modes:
- transactional: the handler runs inside the transaction that marks the job succeeded;
  if the fenced success update finds the lease lost, everything rolls back. The
  transactional jobs of a batch share one transaction, each in a savepoint of its own
  (groups.py).
- at_least_once / at_most_once: the handler runs outside a transaction; successes are
  recorded in one batched statement at the end of the batch.

The parts: lease_keeper.py (leases, heartbeat, deferred starts, time limits, each held
job's Phase), attempt.py (one attempt), groups.py (transactional groups), outcomes.py
(recording how each attempt ended).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from queue import Empty, SimpleQueue
from typing import Any

from django.db import close_old_connections

from tasksapp.engine.db import tempo_connection
from tasksapp.engine.models import Delivery
from tasksapp.engine.sessions import flush_commits
from tasksapp.engine.settings import tempo_settings
from tasksapp.engine.transitions import StartedJob, job_start, job_succeed
from tasksapp.engine.worker.attempt import nothing, run_one
from tasksapp.engine.worker.clock import tightened
from tasksapp.engine.worker.groups import run_group, shares_transaction
from tasksapp.engine.worker.lease_keeper import LeaseKeeper, lease_keeper
from tasksapp.engine.worker.outcomes import RunOutcome, record_successes

# How each end counts on the worker's row: a cancel or a snooze, as asked, is no failure.
COUNTED_AS = {
    RunOutcome.RECORDED_SUCCESS: "succeeded",
    RunOutcome.FAILED: "failed",
    RunOutcome.STOPPED: None,
}


def execute_batch(
    claims: Sequence[Sequence[int | float]], *, handlers_returned: Callable[[], None] = nothing
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
            defer_starts=len(pairs) > 1 and keeper.defers_starts(),
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
                keeper.release(job.id, ended=COUNTED_AS[status])
        jobs = {job.id: job for job in started}
        done = record_successes(finished_ok, jobs, worker=keeper.name, within=keeper.ttl)
        for job_id, *_ in finished_ok:
            keeper.release(job_id, ended="succeeded" if job_id in done else "failed")
    finally:
        # An outcome that could not be recorded (the database went away): stop renewing
        # the lease, so that it expires and the reaper returns the job.
        keeper.forget([job.id for job in started])
    return len(started)


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
        results[0] = run_one(jobs[0], keeper, handler_returned)
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
    None, each result at its index: transactional ones in groups (`run_group`)."""
    item = take()
    while item is not None:
        if pool_thread:
            close_old_connections()  # each pool thread keeps its own healthy connection
        index, job = item
        if shares_transaction(job):
            item = run_group(item, take, keeper, results) or take()
        else:
            results[index] = run_one(job, keeper)
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
    job_start(claims=[NO_JOB], worker="", ttl=0, defer_starts=True)
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
            on_every_pool_thread(_handler_pool, lambda: tempo_connection().close())
            _handler_pool.shutdown(wait=True)
            _handler_pool = None
