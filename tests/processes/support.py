"""Start and stop real dispatcher and worker processes, and private server instances."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import redis

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(
    predicate: Callable[[], object],
    *,
    timeout: float,
    interval: float = 0.2,
    message: str = "condition",
) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{message} not reached within {timeout} s")


class Cluster:
    """Dispatchers and Celery workers as real processes sharing one database and broker."""

    def __init__(
        self,
        *,
        database_url: str,
        broker_url: str,
        queue: str,
        logs: Path,
        netns: str | None = None,
        **settings: str,
    ) -> None:
        # Processes of a simulated host run inside its network namespace.
        self.prefix = ["ip", "netns", "exec", netns] if netns else []
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": broker_url,
            "TEMPO_QUEUE": queue,
            "DJANGO_SECRET_KEY": "test-only-" * 6,
            "PYTHONPATH": str(ROOT),
            "TEMPO_TUNING_COORDINATION_SECONDS": "0.5",
            "TEMPO_CLAIM_TTL_SECONDS": "4",
            "TEMPO_RUN_LEASE_SECONDS": "3",
            **settings,
        }
        self.queue = queue
        self.broker_url = broker_url
        self.logs = logs
        self.processes: dict[str, subprocess.Popen] = {}

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        process = subprocess.Popen(
            [*self.prefix, *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def dispatcher(self, name: str) -> subprocess.Popen:
        return self._start(name, [sys.executable, "manage.py", "dispatcher", "--name", name])

    def worker(
        self,
        name: str,
        *,
        concurrency: int = 4,
        pool: str = "threads",
        queues: tuple[str, ...] = ("default",),
    ) -> subprocess.Popen:
        """A Celery worker consuming the Celery queues of these Tempo queues."""
        celery = str(Path(sys.executable).with_name("celery"))
        consumed = [self.queue if q == "default" else f"{self.queue}.{q}" for q in queues]
        return self._start(
            name,
            [
                celery,
                "-A",
                "schedapp",
                "worker",
                "-Q",
                ",".join(consumed),
                "-P",
                pool,
                "-c",
                str(concurrency),
                "-n",
                f"{name}.{self.queue}@%h",  # the queue in the node name: see purge_queue
                "--without-gossip",
                "--without-mingle",
                "--loglevel=WARNING",
            ],
        )

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.processes[name].send_signal(sig)

    def stop(self) -> None:
        """End every process at once, children included (each leads its own session): a
        test that needs a graceful stop sends the signal itself. What a killed worker leaves
        in the broker, purge_queue removes."""
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes.values():
            process.wait()
        purge_queue(self.broker_url, self.queue)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")


PIDBOX_BINDINGS = "_kombu.binding.celery.pidbox"  # every worker's remote-control queue


def purge_queue(broker_url: str, queue: str) -> None:
    """Leave the shared Redis as it was: the queue's keys, the remote-control bindings of
    workers named after it (a killed worker cannot remove its own), and the messages a
    killed worker left in kombu's `unacked` hash (they name the queue as their routing
    key)."""
    if not broker_url.startswith(("redis://", "rediss://")):
        return  # a RabbitMQ test runs in a virtual host of its own, deleted after it
    client = redis.Redis.from_url(broker_url)
    try:
        for key in client.scan_iter(f"*{queue}*"):
            client.delete(key)
        for member in client.sscan_iter(PIDBOX_BINDINGS):
            if queue.encode() in member:
                client.srem(PIDBOX_BINDINGS, member)
        for tag, raw in client.hscan_iter("unacked"):
            with contextlib.suppress(ValueError, IndexError, TypeError):
                if json.loads(raw)[2] == queue:
                    client.hdel("unacked", tag)
                    client.zrem("unacked_index", tag)
    finally:
        client.close()


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


class PrivatePostgres:
    """A PostgreSQL server of the test's own, on its own port, so it can be restarted."""

    def __init__(
        self,
        *,
        listen_addresses: str = "127.0.0.1",
        trusted_network: str | None = None,
        nice: int = 0,
        settings: dict[str, str] | None = None,
    ) -> None:
        # Not under pytest's tmp_path: its parents are private to root, and the server
        # must run as the postgres user when the tests run as root.
        self.listen_addresses = listen_addresses
        self.trusted_network = trusted_network  # another network allowed in (trust)
        # A niced server's backends stay niced (forked by its postmaster): a bench's load
        # yields to the latency benchmarks sharing the machine.
        self.nice = nice
        self.settings = settings or {}  # more server settings (-c name=value)
        self.root = Path(tempfile.mkdtemp(prefix="tempo-pg-"))
        self.dir = self.root / "pgdata"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/tempo"

    def _run(self, *args: str) -> None:
        subprocess.run(_as_postgres(list(args)), check=True, capture_output=True)

    def start(self) -> PrivatePostgres:
        self.dir.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.dir, "postgres")
        self._run(
            str(PG_BIN / "initdb"),
            "-D",
            str(self.dir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
        )
        if self.trusted_network:
            with open(self.dir / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {self.trusted_network} trust\n")
        self._pg_ctl("start")
        with psycopg.connect(
            f"postgres://postgres@127.0.0.1:{self.port}/postgres", autocommit=True
        ) as conn:
            conn.execute("CREATE DATABASE tempo")
        return self

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k /tmp -c listen_addresses={self.listen_addresses} -c fsync=off"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        niced = ["nice", "-n", str(self.nice)] if self.nice else []
        self._run(
            *niced,
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(self.dir),
            "-o",
            options,
            "-w",
            "-l",
            str(self.dir / "server.log"),
            action,
            *extra,
        )

    def restart(self) -> None:
        self._pg_ctl("restart", "-m", "fast")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A Redis server of the test's own, on its own port, so it can be flushed."""

    def __init__(self, *, bind: str = "127.0.0.1") -> None:
        self.bind = bind  # addresses, space-separated
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> PrivateRedis:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                *self.bind.split(),
                "--protected-mode",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis(port=self.port)
        wait_for(lambda: _pings(client), timeout=10, message="private redis")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def migrate(database_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SECRET_KEY": "test-only-" * 6}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)


INSERT_JOBS = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT %(handler)s, '{}', clock_timestamp() + make_interval(secs => %(start)s + i * %(step)s),
    'scheduled', 0, 5, '{"delays": [0.5, 1, 2]}', %(delivery)s, md5(random()::text || i), 0,
    '', '', '[]'
FROM generate_series(0, %(count)s - 1) AS i
"""

EFFECTS_TABLE = """
CREATE TABLE IF NOT EXISTS test_effects (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL,
    executed_at timestamptz NOT NULL DEFAULT clock_timestamp())
"""


def insert_jobs(
    conn: psycopg.Connection,
    *,
    count: int,
    start: float,
    spread: float,
    handler: str = "tests.handlers.recording.record",
    delivery: str = "transactional",
) -> None:
    """`count` jobs due from `start` s from now, evenly over `spread` s (one statement)."""
    conn.execute(
        INSERT_JOBS,
        {
            "handler": handler,
            "start": start,
            "step": spread / count,
            "count": count,
            "delivery": delivery,
        },
    )


def outcome(conn: psycopg.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT state, count(*) FROM tasksapp_job GROUP BY state").fetchall()
    return dict(rows)


def effect_counts(conn: psycopg.Connection) -> dict[int, int]:
    rows = conn.execute("SELECT job_id, count(*) FROM test_effects GROUP BY job_id").fetchall()
    return dict(rows)


PGBOUNCER = Path("/usr/sbin/pgbouncer")


class PrivatePgBouncer:
    """A PgBouncer of the test's own in transaction pooling mode, on its own port, in front
    of the shared PostgreSQL. Two entries for one database: `<db>` as the web processes
    use it, and `<db>_engine` whose server connections commit asynchronously (set by the
    pooler's `connect_query`, as docs/DEPLOYMENT.md advises for dispatchers and workers)."""

    def __init__(self, *, database: str, pool_size: int = 20) -> None:
        self.database = database
        self.pool_size = pool_size
        self.root = Path(tempfile.mkdtemp(prefix="tempo-pgbouncer-"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def url(self, entry: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{entry}"

    def start(self) -> PrivatePgBouncer:
        db = self.database
        (self.root / "userlist.txt").write_text('"postgres" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{db} = host=127.0.0.1 port=5432 dbname={db}\n"
            f"{db}_engine = host=127.0.0.1 port=5432 dbname={db}"
            " connect_query='SET synchronous_commit = off'\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.root / 'userlist.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {self.pool_size}\n"
            "max_client_conn = 500\nadmin_users = postgres\n"
            f"logfile = {self.root / 'pgbouncer.log'}\n"
        )
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            shutil.chown(self.root, "postgres")
            for path in self.root.iterdir():
                shutil.chown(path, "postgres")
        self.process = subprocess.Popen(
            _as_postgres([str(PGBOUNCER), str(self.root / "pgbouncer.ini")]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait_for(self._answers, timeout=15, message="pgbouncer answers")
        return self

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.url(self.database), autocommit=True) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def transactions(self, entry: str) -> int:
        """Transactions PgBouncer carried for one entry (its admin console's SHOW STATS)."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True) as admin:
            cursor = admin.cursor()
            cursor.execute("SHOW STATS")
            names = [column.name for column in cursor.description]
            for row in cursor.fetchall():
                stats = dict(zip(names, row, strict=True))
                if stats["database"] == entry:
                    return int(stats["total_xact_count"])
        return 0

    def log(self) -> str:
        return (self.root / "pgbouncer.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


PARTITION_LOCK_CLASS = 7_316_001  # tasksapp.engine.cluster.sql.PARTITION_LOCK_CLASS


def partitions_by_session(conn: psycopg.Connection) -> list[int]:
    """Partitions held per dispatcher session in this database, sorted (whatever address
    a session comes from: a pooler, a proxy or a namespace)."""
    rows = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = %s"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " GROUP BY pid",
        [PARTITION_LOCK_CLASS],
    ).fetchall()
    return sorted(count for (count,) in rows)
