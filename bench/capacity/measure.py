"""What one job costs, read from a PostgreSQL server of the bench's own: CPU of every
server process (/proc), WAL bytes (pg_current_wal_lsn), statements (pg_stat_statements)
and row counts on the jobs table (pg_stat_user_tables)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.processes.support import PG_BIN, PrivatePostgres

TICK = os.sysconf("SC_CLK_TCK")
BENCH_TAG = "/* capacity-bench */"  # the bench's own queries, left out of the counts


class StatementsPostgres(PrivatePostgres):
    """A private server with pg_stat_statements loaded (the shared one cannot restart)."""

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = (
            f"-p {self.port} -k /tmp -c listen_addresses={self.listen_addresses} -c fsync=off"
            " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
            " -c max_connections=200"
        )
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.dir), "-o", options, "-w",
            "-l", str(self.dir / "server.log"), action, *extra,
        )  # fmt: skip

    def postmaster_pid(self) -> int:
        return int((self.dir / "postmaster.pid").read_text().split()[0])


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from the 3rd on


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        found += [int(child) for child in children]
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU (user + system) of a process, its live descendants and the children it has
    reaped (a PostgreSQL backend that exited counts in its postmaster's cutime/cstime)."""
    try:
        fields = _stat_fields(pid)
        # utime, stime, cutime, cstime are fields 14-17 (1-based) of /proc/<pid>/stat
        own = sum(int(value) for value in fields[11:15]) / TICK
        return own + sum(tree_cpu_seconds(child) for child in _children(pid))
    except (FileNotFoundError, ProcessLookupError):
        return 0.0  # exited between the listing and the read


@dataclass(frozen=True)
class Snapshot:
    server_cpu_s: float
    wal_lsn: str


def snapshot(conn: psycopg.Connection, postmaster: int) -> Snapshot:
    lsn = conn.execute(f"{BENCH_TAG} SELECT pg_current_wal_lsn()::text").fetchone()[0]
    return Snapshot(server_cpu_s=tree_cpu_seconds(postmaster), wal_lsn=lsn)


def wal_bytes(conn: psycopg.Connection, before: Snapshot, after: Snapshot) -> int:
    query = f"{BENCH_TAG} SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)"
    return int(conn.execute(query, (after.wal_lsn, before.wal_lsn)).fetchone()[0])


def reset_statements(conn: psycopg.Connection) -> None:
    conn.execute(f"{BENCH_TAG} SELECT pg_stat_statements_reset()")


STATEMENTS = f"""{BENCH_TAG}
SELECT s.query, s.calls, s.total_exec_time, s.rows, s.wal_bytes
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = current_database() AND s.query NOT LIKE '%%capacity-bench%%'
ORDER BY s.total_exec_time DESC
"""


@dataclass(frozen=True)
class Statement:
    query: str
    calls: int
    total_ms: float
    rows: int
    wal_bytes: int

    @property
    def on_jobs_table(self) -> bool:
        return "tasksapp_job " in self.query or "tasksapp_job\n" in self.query

    @property
    def kind(self) -> str:
        """The statement's first words, enough to tell the engine's statements apart."""
        words = " ".join(self.query.split())
        return words[:90]


def statements(conn: psycopg.Connection) -> list[Statement]:
    rows = conn.execute(STATEMENTS).fetchall()
    return [Statement(q, int(c), float(t), int(r), int(w)) for q, c, t, r, w in rows]


TUPLES = f"""{BENCH_TAG}
SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, seq_scan, idx_scan
FROM pg_stat_user_tables WHERE relname = 'tasksapp_job'
"""


def job_table_tuples(conn: psycopg.Connection) -> dict[str, int]:
    """The jobs table's row counters. Other sessions' counts are there once they ended;
    this session's own are sent now (a session sends them at most once a second)."""
    conn.execute(f"{BENCH_TAG} SELECT pg_stat_force_next_flush()")
    conn.execute(f"{BENCH_TAG} SELECT pg_stat_clear_snapshot()")
    row = conn.execute(TUPLES).fetchone()
    names = ["inserted", "updated", "hot_updated", "deleted", "seq_scans", "index_scans"]
    return dict(zip(names, (int(value or 0) for value in row), strict=True))


def table_bytes(conn: psycopg.Connection) -> dict[str, int]:
    row = conn.execute(
        f"{BENCH_TAG} SELECT pg_table_size('tasksapp_job'), pg_indexes_size('tasksapp_job')"
    ).fetchone()
    return {"heap_bytes": int(row[0]), "index_bytes": int(row[1])}
