"""The dispatcher's side of the broker: the publisher that sends claimed jobs to the
workers' Celery queues, and the gate that says how many due jobs may be claimed now.

The gate owns what the dispatcher knows of the broker: whether it answers (while it does
not, nothing is claimed, and it is asked again every BROKER_RETRY_SECONDS), what it sent
that may still wait there (`InFlight`), and the backpressure on both the count and the
age of what waits. It is used from the loop and from the limited claimer's thread: its
own state is behind a lock, and a broker error is handed to the loop to act on
(`take_error`), never acted on from the other thread.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from kombu.exceptions import OperationalError as KombuOperationalError

from tasksapp.engine.dispatcher.inflight import InFlight, waiting_job_ids
from tasksapp.engine.dispatcher.messages import split_batches
from tasksapp.engine.settings import DEFAULT_QUEUE, TempoSettings
from tasksapp.engine.transitions import Claim

# The broker unreachable (kombu's connection errors): nothing is claimed meanwhile, and
# it is not asked again for this long (each ask makes one connection retry, after 2 s).
BROKER_ERRORS = (KombuOperationalError, OSError)
BROKER_RETRY_SECONDS = 1.0
NOT_FOUND = "404"  # the reply code of a passive declare of a queue that does not exist
# Age backpressure: no more claims for a queue while a message sent to it may have waited
# longer than this share of a claim's lifetime (tasksapp/engine/dispatcher/inflight.py).
MAX_MESSAGE_WAIT_OF_TTL = 0.5


class CeleryPublisher:
    """Sends claimed batches to the workers' queue and reports its backlog."""

    def __init__(self, *, queue: str, app=None) -> None:
        if app is None:  # the project's Celery app, or Tempo's own
            from tasksapp.engine.worker.celery_app import tempo_app

            app = tempo_app()
        self.app = app
        self.queue = queue
        # What "unreachable" looks like: kombu's own errors and its transport's connection
        # errors (redis-py's ConnectionError is not an OSError; uncaught, it would end the
        # dispatcher, and in `backlog` it would pass for a hiccup: reachable).
        connection = app.connection_for_write()
        self.errors = (*BROKER_ERRORS, *connection.connection_errors)
        self._refusals = connection.channel_errors  # e.g. Redis at maxmemory: OOM

    def __call__(self, batches: list[list[list[int]]], queue: str | None = None) -> None:
        """Publish to `queue` (a Celery queue; by default the default Tempo queue's)."""
        from celery.utils import uuid

        from tasksapp.engine.worker.tasks import RUN_JOBS

        # Straight to the queue (anonymous exchange): no exchange binding in the broker is
        # needed, so a broker that lost its keys (FLUSHALL, restart) still gets messages.
        try:
            with self.app.producer_or_acquire() as producer:
                for batch in batches:
                    message = self.app.amqp.create_task_message(uuid(), RUN_JOBS, [batch], {})
                    producer.publish(
                        message.body,
                        exchange="",
                        routing_key=queue or self.queue,
                        serializer="json",
                        headers=message.headers,
                        **message.properties,
                    )
        except self._refusals as exc:  # reached, but the message was not taken
            raise KombuOperationalError(f"the broker refused the message: {exc}") from exc

    def warm_up(self) -> None:
        from tasksapp.engine.worker.tasks import RUN_JOBS  # noqa: F401  (imported once, here)

        with self.app.producer_or_acquire() as producer:
            # AMQP drops a message sent to a queue nobody declared yet (no worker started
            # so far): declare it as the workers do. On Redis this is a no-op binding.
            producer.maybe_declare(self.app.amqp.queues[self.queue])
        self.backlog()

    def backlog(self, queue: str | None = None) -> int | None:
        """Messages waiting in `queue` (a Celery queue; by default the default Tempo
        queue's), or None if the broker cannot tell; raises one of `errors` if it
        cannot be reached."""
        try:
            with self.app.pool.acquire(block=True) as conn:
                conn.ensure_connection(max_retries=0)  # one attempt: not kombu's retries
                declared = conn.default_channel.queue_declare(queue or self.queue, passive=True)
                return declared.message_count
        except self.errors:
            raise
        except Exception as exc:
            # Redis removes an empty list, and the passive declare of a queue without a
            # list says "not found": nothing waits in it (None would lift backpressure
            # each time the workers empty the queue).
            if str(getattr(exc, "reply_code", "")) == NOT_FOUND:  # '404' from kombu's Redis
                return 0
            return None  # a broker hiccup


class BrokerGate:
    """Publishes claims and decides how many due jobs of a queue may be claimed now."""

    def __init__(self, *, publisher, settings: TempoSettings, now_ms: Callable[[], float]):
        self.publisher = publisher
        self.settings = settings
        self.now_ms = now_ms
        self.errors = getattr(publisher, "errors", BROKER_ERRORS)
        self.in_flight = InFlight()  # messages sent that may still wait in the broker
        self._backlog_of = getattr(publisher, "backlog", None)
        self._lock = threading.Lock()
        self._retry_at = 0.0  # while the broker does not answer: claim nothing before
        self._error: BaseException | None = None  # the last broker error, for the loop
        self._counters: Counter[str] = Counter()
        # Per Tempo queue, the slowest handler its workers ran lately (ms): how long a job
        # may hold a slot, for packing jobs spread in time into one message.
        self.slowest_ms: dict[str, float] = {}

    # -- sending ------------------------------------------------------------------------
    def warm_up(self) -> None:
        """Open the connection now, not on the first due job; a broker away at start-up
        is waited for like any other outage."""
        warm = getattr(self.publisher, "warm_up", None)
        if warm:
            try:
                warm()
            except self.errors as exc:
                self.unreachable(exc)

    def publish(self, queue: str, claims: list[Claim]) -> bool:
        """Send the claims of one Tempo queue; False if the broker did not take them
        (claimed, not sent: they expire and the reaper returns them)."""
        batches = split_batches(
            claims,
            fanout=self.settings.fanout,
            max_batch=self.settings.max_batch,
            parallelism=self.settings.batch_parallelism,
            slowest_ms=self.slowest_ms.get(queue),
        )
        try:
            if queue == DEFAULT_QUEUE:
                self.publisher(batches)
            else:
                self.publisher(batches, self.settings.celery_queue(queue))
        except self.errors as exc:
            self.unreachable(exc)
            return False
        self.in_flight.sent(queue, batches, self.now_ms())
        with self._lock:
            self._counters.update(messages=len(batches))
        return True

    # -- how much to claim --------------------------------------------------------------
    def room_for(self, wanted: int, queue: str = DEFAULT_QUEUE) -> int:
        """How many due jobs of a queue may be claimed now. Claiming faster than the
        workers start jobs would only make claims wait: none while the broker does not
        answer, none while its queue holds tuning.MAX_QUEUED_MESSAGES or a message this
        dispatcher sent may have waited over half a claim's lifetime."""
        if self.now_ms() < self._retry_at:
            return 0
        try:
            backlog = self.backlog(queue)
        except self.errors as exc:
            self.unreachable(exc)
            return 0
        if backlog is None:
            return wanted
        if self._too_old(queue, backlog):
            return 0
        free_messages = self.settings.max_queued_messages - backlog
        return min(wanted, max(0, free_messages) * self.settings.max_batch)

    def backlog(self, queue: str = DEFAULT_QUEUE) -> int | None:
        """Messages waiting in a Tempo queue's Celery queue (None: the broker cannot
        tell); raises one of `errors` when the broker cannot be reached."""
        if self._backlog_of is None:
            return None
        if queue == DEFAULT_QUEUE:
            return self._backlog_of()
        return self._backlog_of(self.settings.celery_queue(queue))

    def _too_old(self, queue: str, backlog: int) -> bool:
        oldest = self.in_flight.oldest_waiting_ms(queue, backlog)
        max_wait_ms = self.settings.claim_ttl_seconds * 1000 * MAX_MESSAGE_WAIT_OF_TTL
        return oldest is not None and self.now_ms() - oldest > max_wait_ms

    def claims_waiting(self) -> list[int]:
        """The ids of claims whose messages may still wait in the broker: the reaper
        keeps their claims (tasksapp/engine/dispatcher/inflight.py)."""
        waiting: list[int] = []
        for queue in self.in_flight.queues():
            try:
                backlog = self.backlog(queue)
            except self.errors:
                continue  # unreachable: returned as ever, claimed again once it answers
            if backlog is None:  # a hiccup: keep what was sent, asked again next time
                backlog = self.settings.max_queued_messages
            waiting += waiting_job_ids(self.in_flight.waiting(queue, backlog))
        return waiting

    # -- when the broker does not answer ------------------------------------------------
    def unreachable(self, exc: BaseException) -> None:
        """Claim nothing for a while; the loop hears of it (`take_error`)."""
        with self._lock:
            self._retry_at = self.now_ms() + BROKER_RETRY_SECONDS * 1000
            self._error = exc

    def take_error(self) -> BaseException | None:
        with self._lock:
            error, self._error = self._error, None
            return error

    def answers(self) -> bool:
        """Ask the broker once; if it answers, claims may go on at once."""
        try:
            self.backlog()
        except self.errors:
            return False
        with self._lock:
            self._retry_at = 0.0
        return True

    def take_counters(self) -> Counter[str]:
        with self._lock:
            counters, self._counters = self._counters, Counter()
            return counters
