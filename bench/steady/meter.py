"""What a stretch of a run costs the machine, by process kind: the side's own processes
(bench.cpu, by session: a worker's pool children apart from its main process), the
private PostgreSQL server (its whole tree, bench.capacity.measure) and each of its
backends, the private Redis server; and the server's WAL and statements.

The bench runs niced; the processes it measures are set back to the normal priority
(`unnice`), so what they cost is what they cost when they are the machine's work."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import SimpleNamespace

import psycopg

from bench.capacity import measure
from bench.cpu import SERVERS, TICKS, cpu_by_part

BACKENDS = f"""{measure.BENCH_TAG}
SELECT pid, coalesce(nullif(application_name, ''), backend_type),
    left(regexp_replace(query, '\\s+', ' ', 'g'), 60), client_port
FROM pg_stat_activity WHERE pid <> pg_backend_pid()
"""


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it."""
    found = [pid]
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                found += descendants(int(child))
    return found


def unnice(pid: int) -> None:
    """Every thread of `pid` and of the processes below it back to niceness 0 (Linux
    keeps a niceness a thread; a process forked later inherits its parent thread's)."""
    for process in descendants(pid):
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{process}/task").iterdir():
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, int(task.name), 0)


def kind(part: str) -> str:
    """`worker-2 pool` → `worker pool`: the processes of a side named `<kind>-<n>`."""
    name, _, pool = part.partition(" ")
    return f"{name.split('-')[0]} {pool}".strip()


def process_cpu(processes: dict) -> dict[str, float]:
    """CPU seconds so far of a side's processes, summed by kind."""
    parts = cpu_by_part(SimpleNamespace(processes=processes))
    spent: dict[str, float] = {}
    for part, seconds in parts.items():
        if part not in SERVERS.values():
            spent[kind(part)] = spent.get(kind(part), 0.0) + seconds
    return spent


def _own_cpu(pid: int) -> float:
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/stat").read_text()
        fields = raw[raw.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    return 0.0


def _port_inodes() -> dict[int, str]:
    """The socket inode of each local TCP port (/proc/net/tcp: `addr:port` in hex)."""
    inodes = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                inodes[int(fields[1].rsplit(":", 1)[1], 16)] = fields[9]
    return inodes


def _socket_owners(processes: dict) -> dict[str, str]:
    """The side's process (`worker-1 pool`, ...) or the bench holding each socket inode."""
    parts = {os.getpid(): "bench"}
    for name, process in processes.items():
        parts[process.pid] = name
        parts.update({child: f"{name} pool" for child in descendants(process.pid)[1:]})
    owners = {}
    for pid, part in parts.items():
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        owners[target[8:-1]] = part
    return owners


def backend_cpu(conn: psycopg.Connection, processes: dict) -> dict[int, tuple[str, str, float]]:
    """(whose, last query, CPU seconds so far) of each server process PostgreSQL lists:
    whose is the side's process at the other end of a client's connection (found by
    its port), else the server process's kind."""
    rows = conn.execute(BACKENDS).fetchall()
    inodes, owners = _port_inodes(), _socket_owners(processes)
    return {
        pid: (owners.get(inodes.get(port, ""), name), query or "", _own_cpu(pid))
        for pid, name, query, port in rows
    }


class Window:
    """Everything a side costs between `with` and its end: CPU seconds by kind (its
    processes, `postgres`, `redis`), per backend, WAL bytes and statements."""

    def __init__(self, conn: psycopg.Connection, postmaster: int, redis_pid: int, processes):
        self.conn, self.postmaster, self.redis_pid = conn, postmaster, redis_pid
        self.processes = processes  # read again at the end: a side may start one inside

    def _cpu(self) -> dict[str, float]:
        return {
            **process_cpu(self.processes),
            "postgres": measure.tree_cpu_seconds(self.postmaster),
            "redis": measure.tree_cpu_seconds(self.redis_pid),
        }

    def __enter__(self) -> Window:
        measure.reset_statements(self.conn)
        self.before = measure.snapshot(self.conn, self.postmaster)
        self.backends_before = backend_cpu(self.conn, self.processes)
        self.cpu_before = self._cpu()
        return self

    def __exit__(self, *exc) -> None:
        after = self._cpu()
        self.cpu = {k: v - self.cpu_before.get(k, 0.0) for k, v in after.items()}
        self.after = measure.snapshot(self.conn, self.postmaster)
        self.wal = measure.wal_bytes(self.conn, self.before, self.after)
        backends = backend_cpu(self.conn, self.processes)
        self.backends = [
            (name, query, seconds - self.backends_before.get(pid, ("", "", 0.0))[2])
            for pid, (name, query, seconds) in backends.items()
        ]
        self.statements = measure.statements(self.conn)
