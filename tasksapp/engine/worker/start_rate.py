"""A rate-limited queue's limit, kept at the start as well as at the claim.

The dispatchers claim a rate-limited queue's jobs at its rate (`JobQueue.rate_tat`), and
the starts follow the claims as long as their messages reach the workers in time. When
they do not (a worker that fell behind on busy cores, a paused worker, a broker that
held them), the messages arrive together, and without a second count their handlers would
begin together: twice the limit in a second, at a partner API that answers with errors.
So before a handler of such a queue begins, its worker reserves the queue's next start
(`QueueStartRate`, the same GCRA at the start: one statement) and waits for its moment,
at once when the messages came in time. The claim still paces what is sent; this only
spreads what comes late.

Which queues are rate-limited is read from the queues' settings at most every
REFRESH_SECONDS, and only when a job of some queue starts: an idle worker reads nothing.
A rate limit set a moment ago holds at the claim at once, at the start by then.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError

from tasksapp.engine.transitions import queue_rate_limits, queue_take_start

REFRESH_SECONDS = 2.0
log = logging.getLogger(__name__)


class StartRates:
    """This worker process's view of the queues' rate limits, and the wait for a start."""

    def __init__(self) -> None:
        self._limits: dict[str, tuple[int, float]] = {}
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def limit_of(self, queue: str) -> tuple[int, float] | None:
        """The queue's (starts, period in s), or None: no rate limit. While the database
        cannot be read, the limits last read hold (a job of a queue without one is not
        failed for want of them)."""
        with self._lock:
            if time.monotonic() - self._read_at >= REFRESH_SECONDS:
                try:
                    self._limits = queue_rate_limits()
                except DatabaseError as exc:
                    log.warning("the queues' rate limits could not be read: %s", exc)
                self._read_at = time.monotonic()
            return self._limits.get(queue)

    def wait_for_start(self, queue: str) -> float:
        """Return once the queue's rate lets one more handler begin (at once for a queue
        without a rate limit); the seconds waited."""
        limit = self.limit_of(queue)
        if limit is None:
            return 0.0
        starts, period = limit
        wait = queue_take_start(queue=queue, limit=starts, period=period)
        if wait > 0:
            time.sleep(wait)
        return wait

    def forget(self) -> None:
        """Read the limits again at the next start (a test changed them)."""
        with self._lock:
            self._read_at = float("-inf")


start_rates = StartRates()
