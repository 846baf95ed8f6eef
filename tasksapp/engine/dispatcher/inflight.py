"""What a dispatcher sent that may still wait in the broker: the claims whose messages sit
in a Celery queue behind busy workers.

A claimed job's lease bounds how long its message may take to reach a worker. Under a
backlog (slow handlers, a paused worker host, a slow broker) a message can wait longer
than that; returning its job then and claiming it again sends a second message behind
the queue while the first starts nothing when it is read at last, and with every message
older than a lease, nothing ever runs (congestion collapse). So the dispatcher keeps, per
Celery queue, the messages it sent in order, and asks the broker how many wait: queues are
first in, first out, so of the messages this dispatcher sent, only the last `backlog` can
still be waiting. Their claims keep their lease (the reaper renews it, the token stays);
the others were taken by a worker, and an expired one among them is returned as before
(its message was lost, or its worker died before starting it).

The same record is the age backpressure: while the oldest message that may still wait is
older than half a lease, no more is claimed for its queue, so what waits stays young and
a newly due job of higher priority is not queued behind a long backlog.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

# Messages remembered per Celery queue: beyond this a sent message is taken for read.
# (At most tuning.MAX_QUEUED_MESSAGES wait by backpressure; other dispatchers' messages
# count in the broker's backlog too.)
MAX_REMEMBERED_MESSAGES = 4096


@dataclass(frozen=True, slots=True)
class SentMessage:
    sent_ms: float  # the dispatcher's database clock when it was published
    job_ids: tuple[int, ...]


class InFlight:
    """The messages this dispatcher published, per Celery queue, oldest first. Used from
    the loop and from the limited claimer's thread: every method holds the lock."""

    def __init__(self) -> None:
        self._sent: dict[str, deque[SentMessage]] = {}
        self._lock = threading.Lock()

    def sent(self, queue: str, batches: list[list[list[int]]], now_ms: float) -> None:
        """Record the messages just published to `queue` ([[id, token, run_at_ms], ...])."""
        with self._lock:
            messages = self._sent.setdefault(queue, deque(maxlen=MAX_REMEMBERED_MESSAGES))
            for batch in batches:
                messages.append(SentMessage(now_ms, tuple(claim[0] for claim in batch)))

    def queues(self) -> list[str]:
        with self._lock:
            return [queue for queue, messages in self._sent.items() if messages]

    def waiting(self, queue: str, backlog: int) -> list[SentMessage]:
        """The messages of `queue` that may still wait, given that `backlog` messages wait
        in it now; the older ones were read and are forgotten."""
        with self._lock:
            return list(self._prune(queue, backlog))

    def oldest_waiting_ms(self, queue: str, backlog: int) -> float | None:
        """When the oldest message of `queue` that may still wait was sent, or None (at
        each claim round: no copy of the record)."""
        with self._lock:
            messages = self._prune(queue, backlog)
            return messages[0].sent_ms if messages else None

    def _prune(self, queue: str, backlog: int) -> deque[SentMessage]:
        messages = self._sent.get(queue, deque())
        while len(messages) > max(0, backlog):
            messages.popleft()
        return messages

    def forget(self) -> None:
        with self._lock:
            self._sent.clear()


def waiting_job_ids(messages: list[SentMessage]) -> list[int]:
    return [job_id for message in messages for job_id in message.job_ids]
