"""What a zero-overhead scheduler would score on the same jobs and the same slots.

Every job is started the moment it is due and a slot is free, first come first served
(FIFO by the moment it became ready), and takes exactly the work's 83 ms; its delay is
start + work − run_at, as the exercise measures ExecuteAt after the work. Each instance
brings its slots while it lives. An instance stopped with SIGINT starts nothing after the
stop and finishes what it runs; one stopped with SIGKILL loses what it runs, and each job
lost is ready again at that very moment (zero detection time). No real scheduler does
better on the same capacity: this is the floor the bench measures Tempo's distance from.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

WORK_SECONDS = 0.083


@dataclass(frozen=True)
class Instance:
    """One instance's slots: from `start` until `stop` (seconds; None: never stopped)."""

    start: float
    stop: float | None = None
    killed: bool = False  # SIGKILL: its running jobs are lost at `stop`
    slots: int = 5


def ideal_delays(
    run_at: Sequence[float], instances: Sequence[Instance], *, work: float = WORK_SECONDS
) -> list[float]:
    """Each job's delay (ms, ExecuteAt − RunAt), in the order of `run_at` (seconds)."""
    slots = [[inst.start, inst] for inst in instances for _ in range(inst.slots)]
    ready = [(at, index) for index, at in enumerate(run_at)]
    heapq.heapify(ready)
    delays = [math.nan] * len(run_at)
    while ready:
        at, index = heapq.heappop(ready)
        slot, start = _first_free(slots, at)
        inst = slot[1]
        end = start + work
        if inst.killed and inst.stop is not None and end > inst.stop:
            slot[0] = math.inf  # the slot dies with the job; the job is ready again
            heapq.heappush(ready, (inst.stop, index))
            continue
        slot[0] = end
        # To the µs, as the database keeps times: float noise must not turn 83 ms into
        # 82.999…, which the exercise's integer average would cut to 82.
        delays[index] = round((end - run_at[index]) * 1000, 3)
    return delays


def _first_free(slots: list[list], at: float) -> tuple[list, float]:
    """The slot that can start a job ready at `at` soonest, and when."""
    best, best_start = None, math.inf
    for slot in slots:
        free_at, inst = slot
        start = max(at, free_at)
        if inst.stop is not None and start >= inst.stop:
            continue  # stopped before it could start it
        if start < best_start:
            best, best_start = slot, start
    if best is None:
        raise ValueError("no instance is left to run the jobs")
    return best, best_start


def efficient(delays: Sequence[float]) -> dict[str, float]:
    """The exercise's precision score of these delays: avg (an integer, as its SQL AVG
    of integers) + stdev."""
    avg = int(statistics.fmean(delays)) if delays else 0
    stdev = statistics.stdev(delays) if len(delays) > 1 else 0.0
    return {"avg": avg, "stdev": round(stdev, 2), "efficient": round(avg + stdev, 2)}


BURSTS = ((1, 1, "due alone"), (2, 9, "due 2-9 at once"), (10, math.inf, "due 10+ at once"))


def excess_by_burst(
    run_at: dict[int, float], ours: dict[int, float], ideal: dict[int, float]
) -> list[dict]:
    """Where a distance from the ideal comes from: per executed job, Tempo's delay less
    the ideal's (ms), grouped by how many jobs were due at the same instant (to the ms)."""
    together = Counter(round(at, 3) for at in run_at.values())
    excess = {job: ours[job] - ideal[job] for job in run_at if job in ours}
    total = sum(excess.values()) or 1e-9
    rows = []
    for low, high, name in BURSTS:
        group = sorted(
            e for job, e in excess.items() if low <= together[round(run_at[job], 3)] <= high
        )
        if group:
            rows.append(
                {
                    "jobs": name,
                    "n": len(group),
                    "excess_avg_ms": round(statistics.fmean(group), 2),
                    "excess_p50_ms": round(group[len(group) // 2], 2),
                    "excess_p95_ms": round(group[int(len(group) * 0.95)], 2),
                    "share_of_excess": round(sum(group) / total, 2),
                }
            )
    return rows
