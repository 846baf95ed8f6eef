"""Shared bench plumbing: a fresh database, real processes, percentiles, output."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SERVER_URL = os.environ.get("BENCH_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/0")


class BenchDatabase:
    """A database of the bench's own, migrated; dropped on exit."""

    def __init__(self, prefix: str, *, migrate: bool = True, server: str = "") -> None:
        self.name = f"{prefix}_{uuid.uuid4().hex[:6]}"
        self.server = server or SERVER_URL
        self.url = f"{self.server}/{self.name}"
        self.migrate = migrate

    def __enter__(self) -> BenchDatabase:
        with psycopg.connect(f"{self.server}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        if self.migrate:
            env = {**os.environ, "DATABASE_URL": self.url}  # the key: bench/__init__.py
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
            )
        return self

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True)

    def __exit__(self, *exc) -> None:
        if os.environ.get("BENCH_KEEP_DB"):
            print(f"kept database {self.name}", file=sys.stderr)
            return
        with psycopg.connect(f"{self.server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def django_on(database_url: str) -> None:
    """Set Django up in this process against the bench's database."""
    import django

    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")
    django.setup()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "avg": statistics.fmean(values) if values else float("nan"),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "p50": percentile(values, 0.50),
        "p95": percentile(values, 0.95),
        "p99": percentile(values, 0.99),
        "max": max(values) if values else float("nan"),
    }


def machine() -> dict[str, str]:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cores": str(os.cpu_count()),
        "memory_gib": f"{mem:.0f}",
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_json(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        **data,
    }
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


def table(rows: list[dict], columns: list[str]) -> str:
    def cell(value) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def bench_cluster(database_url: str, name: str, **settings: str):
    """Dispatchers and workers for a bench: a queue and a log folder of their own, and the
    engine's timings for a long run (a coordination round every 2 s, 10 s claim leases,
    6 s run leases) unless `settings` say otherwise."""
    import tempfile

    from tests.processes.support import Cluster

    return Cluster(
        database_url=database_url,
        broker_url=BROKER_URL,
        queue=f"{name}-{uuid.uuid4().hex[:6]}",
        logs=Path(tempfile.mkdtemp(prefix=f"bench-{name}-")),
        **{
            "TEMPO_TUNING_COORDINATION_SECONDS": "2",
            "TEMPO_CLAIM_TTL_SECONDS": "10",
            "TEMPO_RUN_LEASE_SECONDS": "6",
            **settings,
        },
    )
