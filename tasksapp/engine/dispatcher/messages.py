"""How a dispatcher cuts its claims into Celery messages.

A message costs a publish, a read by a worker, a start and a success statement whatever
it holds, so jobs share messages where they can: many due at once (a burst) are cut
into up to tuning.FANOUT messages, and jobs spread in time (a steady stream) share a
message when one worker slot can run them in turn, each at its instant. How long a job
holds a slot is learnt from the workers: each reports its slowest handler of its last
heartbeats on its row (`slowest_handler_ms`), and the dispatcher reads them at start and
after a publish, as often as they are reported. A queue whose workers have reported
nothing yet gets a message per job.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
from collections.abc import Sequence

from django.db.models.functions import Now

from tasksapp.engine.models import WorkerProcess
from tasksapp.engine.transitions import Claim

# What a worker spends on each job of a message besides its handler (its share of the
# start and success statements, the wait and the call: 0.2-0.3 ms of CPU a no-op job at
# 1,000 jobs/s), with room for a busy machine. Less would pack jobs that then wait for
# each other; more splits a steady round over several slots at once, and each slot's
# next message then reaches it only as its last job ends (a few ms late).
JOB_OVERHEAD_MS = 0.5


def split_batches(
    claims: Sequence[Claim],
    *,
    fanout: int,
    max_batch: int,
    parallelism: int = 1,
    slowest_ms: float | None = None,
) -> list[list[list[int]]]:
    """Cut claimed jobs into messages. Few claims: messages of `parallelism` jobs (one
    each by default), so idle workers run them side by side. Many: up to `max_batch` per
    message, so the broker is not the bottleneck.

    Jobs spread in time share a message when one slot can run them in turn, each at its
    instant: `slowest_ms`, the slowest handler the queue's workers ran lately, says how
    long each may hold the slot (None: not known, nothing is packed so)."""
    if not claims:
        return []
    rows = [[c.id, c.token, c.run_at_ms] for c in sorted(claims, key=lambda c: c.run_at_ms)]
    size = max(min(len(rows), parallelism), math.ceil(len(rows) / fanout))
    size = max(1, min(max_batch, size))
    batches = [rows[i : i + size] for i in range(0, len(rows), size)]
    if slowest_ms is None or size > 1:
        return batches
    in_turn = pack_in_turn(rows, hold_ms=slowest_ms + JOB_OVERHEAD_MS, max_batch=max_batch)
    return in_turn if len(in_turn) < len(batches) else batches


def pack_in_turn(rows: list[list[int]], *, hold_ms: float, max_batch: int) -> list[list[list[int]]]:
    """The fewest messages in which no job waits for another: rows (by run_at) each
    holding a slot `hold_ms` from its instant, greedily into the message free earliest
    (interval partitioning). Jobs due at one instant land in messages of their own."""
    free_at: list[tuple[float, int]] = []  # (when the message's last job is done, index)
    messages: list[list[list[int]]] = []
    for row in rows:
        run_at = row[2]
        while free_at and len(messages[free_at[0][1]]) >= max_batch:
            heapq.heappop(free_at)  # full: it takes no more
        if free_at and free_at[0][0] <= run_at:
            index = heapq.heappop(free_at)[1]
        else:
            index = len(messages)
            messages.append([])
        messages[index].append(row)
        heapq.heappush(free_at, (run_at + hold_ms, index))
    return messages


def slowest_handlers_read(*, within_seconds: float) -> dict[str, float]:
    """Per Tempo queue, the slowest handler its workers that beat within the last
    `within_seconds` reported (the slowest of them: any may take the next message)."""
    rows = WorkerProcess.objects.filter(
        slowest_handler_ms__isnull=False,
        heartbeat_at__gte=Now() - dt.timedelta(seconds=within_seconds),
    ).values_list("queues", "slowest_handler_ms")
    slowest: dict[str, float] = {}
    for queues, ms in rows:
        for queue in queues or ():
            slowest[queue] = max(ms, slowest.get(queue, 0.0))
    return slowest
