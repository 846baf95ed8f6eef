"""Each scheduler of the comparison behind one small interface: prepare its database and
broker, enqueue jobs at their run times, start and stop an instance, and read back what
it cost. An instance's processes run in a session of their own, so a signal reaches all
of them, as Ctrl-C or a machine's death would."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import redis

from bench.common import ROOT
from bench.peers.work import SCHEMA
from tests.processes.support import Cluster, migrate

BIN = Path(sys.executable).parent
HANDLER = "bench.peers.tempo_handler.peer_work"
INSERT_TEMPO = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT %(handler)s, '{}', r, 'scheduled', 0, 5, '{"delays": [1, 2, 5]}', 'at_least_once',
    md5(random()::text || r::text), 0, '', '', '[]'
FROM unnest(%(run_at)s::timestamptz[]) AS r
RETURNING id, run_at
"""
INSERT_JOBS = (
    "INSERT INTO peer_job (id, run_at) SELECT * FROM unnest(%s::bigint[], %s::timestamptz[])"
)
TABLE_SCANS = """
SELECT COALESCE(sum(seq_scan), 0) + COALESCE(sum(idx_scan), 0) FROM pg_stat_user_tables
WHERE relname = %s
"""


def _ts(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


class Peer:
    name = ""
    label = ""

    def __init__(self) -> None:
        self.instances: dict[int, list[subprocess.Popen]] = {}

    def prepare(self, database_url: str, broker_url: str, logs: Path, slots: int) -> None:
        self.database_url, self.broker_url, self.logs, self.slots = (
            database_url,
            broker_url,
            logs,
            slots,
        )
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(SCHEMA)
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PEERS_DATABASE_URL": database_url,
            "PEERS_BROKER_URL": broker_url,
        }

    def enqueue(self, conn: psycopg.Connection, jobs: list[tuple[int, float]]) -> None:
        raise NotImplementedError

    def record(self, conn: psycopg.Connection, jobs: list[tuple[int, float]]) -> None:
        ids, run_at = zip(*jobs, strict=True)
        conn.execute(INSERT_JOBS, [list(ids), [_ts(t) for t in run_at]])

    def start(self, instance: int) -> None:
        self.instances[instance] = [self._spawn(instance, self.command(instance))]

    def command(self, instance: int) -> list[str]:
        raise NotImplementedError

    def _spawn(self, instance: int, command: list[str], env: dict | None = None):
        log = open(self.logs / f"i{instance + 1}.log", "ab")  # noqa: SIM115 - lives with the process
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=env or self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, instance: int, sig: int) -> None:
        for process in self.instances.get(instance, []):
            if process.poll() is None:
                os.killpg(process.pid, sig)

    def stop(self) -> None:
        processes = [p for group in self.instances.values() for p in group]
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def cost(self, conn: psycopg.Connection) -> dict:
        return {"cost": "", "jobs_table_scans_per_job": ""}

    def leftovers(self, conn: psycopg.Connection, broker_url: str) -> dict:
        return {}


class Tempo(Peer):
    name = label = "tempo"

    def prepare(self, database_url, broker_url, logs, slots) -> None:
        super().prepare(database_url, broker_url, logs, slots)
        migrate(database_url)
        self.cluster = Cluster(
            database_url=database_url,
            broker_url=broker_url,
            queue=f"peers-{uuid.uuid4().hex[:6]}",
            logs=logs,
            TEMPO_TUNING_COORDINATION_SECONDS="2",  # bench_cluster's timings for a long run
            TEMPO_CLAIM_TTL_SECONDS="10",
            TEMPO_RUN_LEASE_SECONDS="6",
            TEMPO_BATCH_PARALLELISM=str(slots),
            TEMPO_HANDLER_MODULES="bench.peers.tempo_handler",
        )

    def enqueue(self, conn, jobs) -> None:
        rows = conn.execute(
            INSERT_TEMPO, {"handler": HANDLER, "run_at": [_ts(t) for _, t in jobs]}
        ).fetchall()
        conn.execute(INSERT_JOBS, [[r[0] for r in rows], [r[1] for r in rows]])

    def start(self, instance: int) -> None:
        self.instances[instance] = [
            self.cluster.dispatcher(f"d{instance + 1}"),
            self.cluster.worker(f"w{instance + 1}", concurrency=1),
        ]

    def stop(self) -> None:
        super().stop()
        self.cluster.stop()

    def cost(self, conn) -> dict:
        jobs = conn.execute("SELECT count(*) FROM peer_job").fetchone()[0]
        polls, lost, reads = conn.execute(
            "SELECT COALESCE(sum(polls), 0), COALESCE(sum(claims_lost), 0),"
            " COALESCE(sum(single_reads), 0) FROM tasksapp_dispatchercounter"
        ).fetchone()
        scans = conn.execute(TABLE_SCANS, ["tasksapp_job"]).fetchone()[0]
        return {
            "cost": polls * 100 + lost * 10 + reads,
            "jobs_table_scans_per_job": round(scans / max(jobs, 1), 2),
        }

    def leftovers(self, conn, broker_url) -> dict:
        return dict(conn.execute("SELECT state, count(*) FROM tasksapp_job GROUP BY 1").fetchall())


class CeleryEta(Peer):
    """`apply_async(eta=...)`, acks_late, a worker -c 5 (prefork, Celery's default)."""

    name, label = "celery", "celery (defaults)"
    visibility_timeout: float | None = None

    def prepare(self, database_url, broker_url, logs, slots) -> None:
        super().prepare(database_url, broker_url, logs, slots)
        if self.visibility_timeout:
            self.env["PEERS_VISIBILITY_TIMEOUT"] = str(self.visibility_timeout)
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("PEERS_")})
        from bench.peers import celery_peer

        celery_peer.app.conf.broker_url = broker_url
        if self.visibility_timeout:
            celery_peer.app.conf.broker_transport_options = {
                "visibility_timeout": self.visibility_timeout
            }
        self.task = celery_peer.execute

    def enqueue(self, conn, jobs) -> None:
        self.record(conn, jobs)
        for job_id, run_at in jobs:
            self.task.apply_async(args=[job_id], eta=_ts(run_at))

    def command(self, instance: int) -> list[str]:
        return [
            str(BIN / "celery"),
            "-A",
            "bench.peers.celery_peer",
            "worker",
            "-c",
            str(self.slots),
            "-n",
            f"i{instance + 1}@%h",
            "--loglevel=WARNING",
        ]

    def leftovers(self, conn, broker_url) -> dict:
        client = redis.Redis.from_url(broker_url)
        return {"unacked": client.hlen("unacked"), "queued": client.llen("peers")}


class CeleryTuned(CeleryEta):
    """The visibility timeout lowered to just above the longest ETA of the run, the
    lowest value the Celery documentation allows (a shorter one redelivers every ETA
    task still waiting)."""

    name, label = "celery-tuned", "celery (visibility timeout = longest ETA + 10 s)"

    def prepare(self, database_url, broker_url, logs, slots) -> None:
        self.visibility_timeout = self.longest_eta + 10
        super().prepare(database_url, broker_url, logs, slots)


class Procrastinate(Peer):
    """`configure(schedule_at=...).defer()`, a worker of concurrency 5 (LISTEN/NOTIFY on,
    as by default)."""

    name, label = "procrastinate", "procrastinate (defaults: polling 5 s)"
    tuning: dict[str, str] = {}

    def prepare(self, database_url, broker_url, logs, slots) -> None:
        super().prepare(database_url, broker_url, logs, slots)
        self.env.update({"PEERS_CONCURRENCY": str(slots), **self.tuning})
        from procrastinate import App, PsycopgConnector
        from procrastinate.schema import SchemaManager

        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(SchemaManager.get_schema())
        self.app = App(connector=PsycopgConnector(conninfo=database_url))
        self.app.open()

    def enqueue(self, conn, jobs) -> None:
        self.record(conn, jobs)
        for job_id, run_at in jobs:
            deferrer = self.app.configure_task(
                "peers.execute", queue="peers", schedule_at=_ts(run_at)
            )
            deferrer.defer(job_id=job_id)

    def command(self, instance: int) -> list[str]:
        return [sys.executable, "-m", "bench.peers.procrastinate_peer"]

    def stop(self) -> None:
        super().stop()
        self.app.close()

    def cost(self, conn) -> dict:
        jobs = conn.execute("SELECT count(*) FROM peer_job").fetchone()[0]
        fetches = conn.execute(
            "SELECT COALESCE(sum(calls), 0) FROM pg_stat_user_functions"
            " WHERE funcname = 'procrastinate_fetch_job_v2'"
        ).fetchone()[0]
        scans = conn.execute(TABLE_SCANS, ["procrastinate_jobs"]).fetchone()[0]
        return {
            "cost": fetches * 100,
            "jobs_table_scans_per_job": round(scans / max(jobs, 1), 2),
            "fetch_calls": fetches,
        }

    def leftovers(self, conn, broker_url) -> dict:
        return dict(
            conn.execute(
                "SELECT status::text, count(*) FROM procrastinate_jobs"
                " WHERE task_name = 'peers.execute' GROUP BY 1"
            ).fetchall()
        )


class ProcrastinateTuned(Procrastinate):
    """Polling every 0.5 s, and the documented periodic task that retries the jobs of a
    worker whose heartbeat stopped (heartbeats every 2 s, stalled after 10 s)."""

    name, label = "procrastinate-tuned", "procrastinate (polling 0.5 s, stalled jobs retried)"
    tuning = {"PEERS_POLLING_SECONDS": "0.5", "PEERS_RETRY_STALLED": "1"}


class Dramatiq(Peer):
    """`send_with_options(delay=ms)`, a worker of 1 process and 5 threads."""

    name, label = "dramatiq", "dramatiq (defaults)"
    tuning: dict[str, str] = {}

    def prepare(self, database_url, broker_url, logs, slots) -> None:
        super().prepare(database_url, broker_url, logs, slots)
        self.env.update(self.tuning)
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("PEERS_")})
        from bench.peers import dramatiq_peer

        dramatiq_peer.broker.client = redis.Redis.from_url(broker_url)
        self.actor = dramatiq_peer.execute

    def enqueue(self, conn, jobs) -> None:
        self.record(conn, jobs)
        now = time.time()
        for job_id, run_at in jobs:
            self.actor.send_with_options(args=(job_id,), delay=max(0, int((run_at - now) * 1000)))

    def command(self, instance: int) -> list[str]:
        return [
            str(BIN / "dramatiq"),
            "bench.peers.dramatiq_peer",
            "--processes",
            "1",
            "--threads",
            str(self.slots),
        ]

    def leftovers(self, conn, broker_url) -> dict:
        client = redis.Redis.from_url(broker_url)
        return {k.decode(): client.type(k).decode() for k in client.scan_iter("dramatiq:*")}


class DramatiqTuned(Dramatiq):
    """Workers poll Redis every 100 ms at most (dramatiq_worker_timeout, default 1 s), and
    a silent worker's messages are requeued after 10 s (heartbeat_timeout, default 60 s)."""

    name, label = "dramatiq-tuned", "dramatiq (poll 100 ms, heartbeat timeout 10 s)"
    tuning = {"dramatiq_worker_timeout": "100", "PEERS_HEARTBEAT_TIMEOUT_MS": "10000"}


PEERS = [
    Tempo,
    CeleryEta,
    CeleryTuned,
    Procrastinate,
    ProcrastinateTuned,
    Dramatiq,
    DramatiqTuned,
]
NAMES = [p.name for p in PEERS]


def make(name: str, *, longest_eta: float = 0) -> Peer:
    for cls in PEERS:
        if cls.name == name:
            peer = cls()
            peer.longest_eta = longest_eta
            return peer
    raise ValueError(f"unknown scheduler {name!r}; one of {', '.join(NAMES)}")
