"""What a run's readings say, without a database or a process: CPU per job by kind, start
lags, jobs run twice or never, and the rows of the bench's tables."""

from __future__ import annotations

from collections import Counter

from bench.tasks_backends.counting import start_lags_ms

KINDS = ["postgres", "redis", "dispatcher", "timer", "worker", "worker pool"]


def cpu_ms_per_job(cpu: dict[str, float], jobs: int) -> dict[str, float]:
    """CPU milliseconds a job of each kind, `workers` (main and pool) and `total`."""
    if not jobs:
        return {}
    figures = {k: round(cpu.get(k, 0.0) * 1000 / jobs, 3) for k in KINDS if k in cpu}
    figures["workers"] = round(
        sum(cpu.get(k, 0.0) for k in ("worker", "worker pool")) * 1000 / jobs, 3
    )
    figures["total"] = round(sum(cpu.values()) * 1000 / jobs, 3)
    return figures


def cpu_ms_per_second(cpu: dict[str, float], seconds: float) -> dict[str, float]:
    """The idle cost: CPU milliseconds a second of each kind, and in all."""
    figures = {k: round(v * 1000 / seconds, 2) for k, v in sorted(cpu.items())}
    figures["total"] = round(sum(cpu.values()) * 1000 / seconds, 2)
    return figures


def starts(n: int, recorded: list[tuple[int, float, float]]) -> dict:
    """Of keys 0..n-1 and the starts recorded (key, due, started): each key's first start's
    lag, the keys started more than once, and the starts of keys never sent."""
    first: dict[int, tuple[float, float]] = {}
    counts: Counter[int] = Counter()
    for key, due, started in recorded:
        counts[key] += 1
        if key not in first or started < first[key][1]:
            first[key] = (due, started)
    return {
        "pairs": [first.get(k, (None, None)) for k in range(n)],
        "twice": sum(1 for k in range(n) if counts[k] > 1),
        "strays": sum(c for k, c in counts.items() if not 0 <= k < n),
    }


def lags(pairs: list[tuple[float | None, float | None]]) -> dict:
    """Start lag p50/p99/max (ms), early and never-started counts, of (due, started)."""
    return start_lags_ms([(due or 0.0, started) for due, started in pairs])


def curve_row(r: dict) -> dict:
    cpu = r["cpu_ms_per_job"]
    return {
        "side": r["side"],
        "delivery": r.get("delivery", ""),
        "jobs/s due": r["rate"],
        "run / due": f"{r['done']:,} / {r['jobs']:,}",
        "jobs/s run": r["jobs_per_s"],
        "twice": r["twice"],
        "early": r["early"],
        "lag p50 / p99 ms": f"{r['lag_p50_ms']} / {r['lag_p99_ms']}",
        "PG": cpu.get("postgres", ""),
        "Redis": cpu.get("redis", ""),
        "dispatcher / timer": cpu.get("dispatcher", cpu.get("timer", "")),
        "workers (main + pool)": (
            f"{cpu.get('workers', 0):.3f}"
            f" ({cpu.get('worker', 0):.3f} + {cpu.get('worker pool', 0):.3f})"
        ),
        "total CPU ms/job": cpu.get("total", ""),
        "WAL B/job": r["wal_bytes_per_job"],
        "insert WAL B/job": r.get("insert_wal_bytes_per_job", ""),
    }


CURVE_COLUMNS = list(
    curve_row(
        {
            "side": "",
            "rate": 0,
            "done": 0,
            "jobs": 0,
            "jobs_per_s": 0,
            "twice": 0,
            "early": 0,
            "lag_p50_ms": 0,
            "lag_p99_ms": 0,
            "cpu_ms_per_job": {},
            "wal_bytes_per_job": 0,
        }
    )
)


def idle_row(side: str, idle: dict[str, float]) -> dict:
    return {"side": side, **{k: idle.get(k, "") for k in [*KINDS, "total"]}}


def backend_rows(backends: list[tuple[str, str, float]], jobs: int, top: int = 8) -> list[dict]:
    """The server processes that cost most, CPU ms a job each, with their last query."""
    ranked = sorted(backends, key=lambda b: -b[2])[:top]
    return [
        {"process": name, "last query": query, "CPU ms/job": round(seconds * 1000 / jobs, 3)}
        for name, query, seconds in ranked
        if jobs
    ]


def statement_rows(statements, jobs: int, top: int = 8) -> list[dict]:
    return [
        {
            "statement": s.kind[:70],
            "calls/job": round(s.calls / jobs, 3),
            "mean ms": round(s.total_ms / s.calls, 3),
            "total ms/job": round(s.total_ms / jobs, 3),
            "rows/call": round(s.rows / s.calls, 1),
        }
        for s in statements[:top]
        if jobs and s.calls
    ]
