"""The worker's loop on a broker without an event loop (the embedded file-system broker
of `./bin/run`).

Celery runs such a worker in `synloop`, which drains the broker with a 2 s timeout and,
only between two drains, performs its pending operations: among them the
acknowledgements of tasks that finished on pool threads. With acks_late and a prefetch of
one message per slot, a full window is acknowledged only when that timeout ends, so the
worker read one window of messages every 2 s: on `./bin/run` 4 messages each 2.0 s, and
demo jobs due one a second started 12 s late on a busy machine. `PollingLoop` gives such
a worker the same loop with a drain timeout of POLL_SECONDS: a slot is free again within
that of its task's end. Workers on Redis or RabbitMQ run on Celery's event loop (the hub)
and are left as they are.
"""

from __future__ import annotations

from celery import bootsteps
from celery.worker import state

POLL_SECONDS = 0.05  # as often as the embedded broker's own polling


def polling_synloop(obj, connection, consumer, blueprint, hub, qos, *args, **kwargs) -> None:
    """Celery's `synloop` (celery.worker.loops), its drain timeout POLL_SECONDS."""
    consumer.on_message = obj.create_task_handler()
    consumer.consume()
    obj.on_ready()
    while blueprint.state == bootsteps.RUN and obj.connection:
        try:
            state.maybe_shutdown()
        finally:
            if qos.prev != qos.value:
                qos.update()
            try:
                obj.perform_pending_operations()
                connection.drain_events(timeout=POLL_SECONDS)
            except TimeoutError:
                pass
            except OSError:
                if blueprint.state == bootsteps.RUN:
                    raise


class PollingLoop(bootsteps.StartStopStep):
    """A consumer step: a worker without an event loop runs `polling_synloop` (started
    before the event loop step, which is always last). Green pools keep Celery's loop (it
    drives their heartbeats)."""

    requires = {"celery.worker.consumer.connection:Connection"}

    def start(self, consumer) -> None:
        if consumer.hub is None and not getattr(consumer.pool, "is_green", False):
            consumer.loop = polling_synloop
