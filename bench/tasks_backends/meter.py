"""CPU seconds a backend costs the machine: its own processes (bench.cpu, by session), the
private PostgreSQL server (its postmaster and the children it forks: each child leads a
session of its own, so they are found by parent; the postmaster's reaped children count
through its cutime/cstime) and the private Redis server."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from bench.cpu import SERVERS, TICKS, cpu_by_part


def _fields(pid: str) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # state ppid pgrp session ... utime stime


def tree_cpu(root: int) -> float:
    """CPU seconds of process `root`, its live children and its reaped ones."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fields = _fields(pid)
        if fields is None:
            continue
        if int(pid) == root:
            total += sum(int(f) for f in fields[11:15]) / TICKS  # utime stime cutime cstime
        elif int(fields[1]) == root:
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


class Meter:
    def __init__(self, *, postmaster_pid: int, redis_pid: int) -> None:
        self.postmaster_pid, self.redis_pid = postmaster_pid, redis_pid

    def read(self, side) -> dict[str, float]:
        parts = cpu_by_part(SimpleNamespace(processes=side.processes))
        return {
            "processes": sum(v for k, v in parts.items() if k not in SERVERS.values()),
            "postgres": tree_cpu(self.postmaster_pid),
            "redis": tree_cpu(self.redis_pid),
        }

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {part: after[part] - before[part] for part in before}
