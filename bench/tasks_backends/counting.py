"""What a run's rows say, without a database: start lags, and tasks lost or run twice."""

from __future__ import annotations

from collections import Counter

from bench.common import percentile

SUCCESSFUL = "SUCCESSFUL"


def start_lags_ms(rows: list[tuple[float, float | None]]) -> dict[str, float | int]:
    """Start lag (started − run_after, ms) of (run_after, started) epoch pairs: p50, p99,
    max, how many started early (before run_after) and how many never started."""
    lags = [(started - due) * 1000 for due, started in rows if started is not None]
    return {
        "started": len(lags),
        "not_started": len(rows) - len(lags),
        "early": sum(1 for lag in lags if lag < 0),
        "lag_p50_ms": round(percentile(lags, 0.50), 1),
        "lag_p99_ms": round(percentile(lags, 0.99), 1),
        "lag_max_ms": round(max(lags), 1) if lags else float("nan"),
    }


def exactly_once(
    keys: range | list[int], statuses: dict[int, str], effects: Counter[int]
) -> dict[str, object]:
    """Of the tasks `keys` enqueued: not successful at the end (lost: READY, RUNNING or
    FAILED, or no result at all), those whose row is missing, those whose row was written
    more than once (doubled), and the rows of keys never enqueued (strays)."""
    wanted = set(keys)
    return {
        "tasks": len(wanted),
        "successful": sum(1 for k in wanted if statuses.get(k) == SUCCESSFUL),
        "lost": sum(1 for k in wanted if statuses.get(k) != SUCCESSFUL),
        "rows_missing": sum(1 for k in wanted if effects.get(k, 0) == 0),
        "doubled": sum(1 for k in wanted if effects.get(k, 0) > 1),
        "strays": sum(n for k, n in effects.items() if k not in wanted),
        "left": dict(
            Counter(statuses.get(k, "none") for k in wanted if statuses.get(k) != SUCCESSFUL)
        ),
    }


def kill_points(tasks: int, kills: int) -> list[int]:
    """The finished counts at which the workers are killed: evenly inside the burst."""
    return [tasks * (i + 1) // (kills + 1) for i in range(kills)]


def ratio(tempo: float, other: float) -> str:
    """Tempo's figure over the other's, as `3.2×`; '—' when either is missing or zero."""
    if not tempo or not other or tempo != tempo or other != other:
        return "—"
    return f"{tempo / other:.2f}×"
