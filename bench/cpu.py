"""CPU time by part of the service, read from /proc: where a bench's jobs spend the
machine. The processes a bench cluster starts each lead a session of their own (their
children, prefork's pool processes, share it); the servers are found by name.

    before = cpu_by_part(cluster)
    ...                                  # the work measured
    spent = cpu_spent(before, cpu_by_part(cluster))   # seconds per part
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
SERVERS = {"postgres": "postgres", "redis-server": "redis"}


def _stat(pid: str) -> tuple[str, int, float] | None:
    """(command name, session id, CPU seconds) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    # After the name: state ppid pgrp session ... utime (12th) stime (13th).
    return name, int(fields[3]), (int(fields[11]) + int(fields[12])) / TICKS


def cpu_by_part(cluster) -> Counter[str]:
    """CPU seconds used so far by each process of `cluster` (a worker's pool children
    apart from its main process) and by the PostgreSQL and Redis servers on this host."""
    sessions = {process.pid: name for name, process in cluster.processes.items()}
    spent: Counter[str] = Counter()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        stat = _stat(pid)
        if stat is None:
            continue
        name, session, seconds = stat
        if session in sessions:
            part = sessions[session]
            spent[part if int(pid) == session else f"{part} pool"] += seconds
        elif name in SERVERS:
            spent[SERVERS[name]] += seconds
    return spent


def cpu_spent(before: Counter[str], after: Counter[str]) -> dict[str, float]:
    """Seconds each part used between two readings (a process that ended in between
    is not counted)."""
    return {part: round(after[part] - before.get(part, 0.0), 2) for part in sorted(after)}
