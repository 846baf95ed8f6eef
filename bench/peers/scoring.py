"""The exercise's scoring, for any scheduler: from the jobs (id, run_at) and the work's
own records of each execution (job id, when the handler began, when the work recorded
its ExecuteAt with the database clock)."""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from collections.abc import Iterable

MAX_DELAY_MS = 30_000


def score(
    jobs: dict[int, dt.datetime],
    executions: Iterable[tuple[int, dt.datetime, dt.datetime]],
) -> dict:
    """missing: never executed; duplicated: executed more than once; early: a handler
    began before run_at; late: the first execution more than 30 s after run_at. The
    delay of a job is its first execution's ExecuteAt - RunAt, in ms."""
    runs: dict[int, list[tuple[dt.datetime, dt.datetime]]] = defaultdict(list)
    for job_id, began, executed in executions:
        if job_id not in jobs:
            raise ValueError(f"an execution of unknown job {job_id}")
        runs[job_id].append((began, executed))
    delays = [_ms(min(e for _, e in runs[j]) - run_at) for j, run_at in jobs.items() if runs[j]]
    early = sum(1 for j, run_at in jobs.items() if any(b < run_at for b, _ in runs[j]))
    return {
        "jobs": len(jobs),
        "executed": len(delays),
        "missing": len(jobs) - len(delays),
        "duplicated": sum(1 for r in runs.values() if len(r) > 1),
        "early": early,
        "late": sum(1 for d in delays if d > MAX_DELAY_MS),
        **precision(delays),
    }


def precision(delays: list[float]) -> dict:
    """The exercise's efficient score: AVG (of integers, as its SQL) + STDEV, in ms."""
    avg = int(statistics.fmean(delays)) if delays else 0
    stdev = statistics.stdev(delays) if len(delays) > 1 else 0.0
    return {"avg_ms": avg, "stdev_ms": round(stdev, 2), "efficient": round(avg + stdev, 2)}


def passed(result: dict) -> bool:
    return not (result["missing"] or result["duplicated"] or result["early"] or result["late"])


def per_job(count: float, jobs: int) -> float:
    return round(count / max(jobs, 1), 2)


def _ms(delta: dt.timedelta) -> float:
    return delta.total_seconds() * 1000
