"""Celery tasks: thin adapters over services."""

import functools

from celery import current_app, shared_task
from celery.signals import worker_process_init, worker_ready
from django.db import close_old_connections

from tasksapp.engine.runtime import freeze_startup_heap
from tasksapp.engine.sessions import use_engine_sessions
from tasksapp.engine.settings import tempo_settings
from tasksapp.engine.worker.executor import (
    execute_batch,
    on_every_pool_thread,
    warm_handler_pool,
    warm_up,
)
from tasksapp.engine.worker.lease_keeper import end_processes_at_time_limit, lease_keeper
from tasksapp.engine.worker.wakeup import free_slot

RUN_JOBS = "tasksapp.run_jobs"


# acks_late: a worker's prefetch window then counts running tasks, so it never holds a
# message it cannot start while another worker is idle. The slot is given back once the
# task's handlers have returned, before their commit (`free_slot`): the next message waits
# for that commit at most. Recovery does not depend on redelivery (leases do); a
# redelivered message finds its job started and does nothing.
@shared_task(
    name=RUN_JOBS,
    bind=True,
    ignore_result=True,
    acks_late=True,
    Request="tasksapp.engine.worker.wakeup:WakingRequest",
)
def run_jobs(self, claims: list[list[int]]) -> int:
    """Run a batch of claimed jobs: [[job id, fencing token, run_at ms], ...]."""
    close_old_connections()  # drop a broken or too old connection, keep a healthy one
    slot = functools.partial(free_slot, self.request.id)
    return execute_batch(claims, handlers_returned=slot)


def _served_queues() -> list[str]:
    """The Tempo queues whose Celery queues this worker consumes (`celery worker -Q`)."""
    settings = tempo_settings()
    consumed = current_app.amqp.queues.consume_from or {}
    return sorted(filter(None, (settings.tempo_queue(name) for name in consumed)))


@worker_ready.connect
def _prepare_worker(sender=None, **kwargs) -> None:
    """Threads/solo pools run jobs in this process: heartbeat from the start."""
    use_engine_sessions()
    pool = getattr(sender, "pool", None)
    if type(pool).__module__ == "celery.concurrency.prefork":
        freeze_startup_heap()  # the parent receives, hands out and acknowledges messages
        return  # each child prepares itself (worker_process_init)
    lease_keeper().queues = _served_queues()
    warm_handler_pool()
    executor = getattr(pool, "executor", None)  # the threads pool runs tasks on its threads
    if executor is not None:
        on_every_pool_thread(executor, warm_up)
    else:
        warm_up()
    freeze_startup_heap()


@worker_process_init.connect
def _prepare_worker_child(**kwargs) -> None:
    """A prefork child: a handler past its time limit ends it (the pool starts another)."""
    use_engine_sessions()
    end_processes_at_time_limit()
    lease_keeper().queues = _served_queues()
    warm_handler_pool()
    warm_up()
    freeze_startup_heap()
