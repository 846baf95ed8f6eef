"""Each scheduler of the comparison behind one small interface: its database, its
processes (named `<kind>-<n>`, each leading a session of its own), the warm-up, a steady
stream of no-op jobs due `rate` a second from an instant, and what the stream left:
(due, started) of each job, jobs run twice.

    tempo            1 dispatcher, 2 Celery workers prefork -c 1 (tests.processes.support)
    celery-timer     2 raw Celery workers prefork -c 1, a timer process sending each task
                     when due (bench.steady.timer)
    celery-eta       2 raw Celery workers prefork -c 1, every task sent up front with
                     apply_async(eta=...)
    django-tasks-db  2 `manage.py db_worker` (its default 1 s polling)
    procrastinate    2 workers of concurrency 1 (LISTEN/NOTIFY, its default 5 s polling)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import redis

from bench.capacity.__main__ import INSERT, NOOP
from bench.capacity.measure import BENCH_TAG
from bench.common import ROOT
from bench.steady import lags, report
from bench.steady.meter import unnice
from bench.tasks_backends.sides import SETTINGS, TABLE
from tests.processes.support import Cluster, migrate, wait_for

WORKERS = 2
WARM_UP = 4  # jobs run before anything is measured: every process up and connected
BIN = Path(sys.executable).parent


def epoch(at: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(at, tz=dt.UTC)


class Side:
    name = ""
    idle_as = ""  # another side whose idle cost this one's is (the same processes)

    def __init__(self, *, server_url: str, broker_url: str, logs: Path) -> None:
        self.broker_url, self.logs = broker_url, logs
        self.database = f"steady_{self.name.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
        self.url = f"{server_url}/{self.database}"
        self.server_url = server_url
        self.processes: dict[str, subprocess.Popen] = {}

    # --- the database --------------------------------------------------------------
    def create(self) -> None:
        with psycopg.connect(f"{self.server_url}/postgres", autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.database}"')
        self.sql = psycopg.connect(self.url, autocommit=True)
        self.sql.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def drop(self) -> None:
        self.sql.close()
        with psycopg.connect(f"{self.server_url}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')

    # --- processes -------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(ROOT)}

    def spawn(self, name: str, args: list[str]) -> None:
        log = open(self.logs / f"{self.name}-{name}.log", "ab")  # noqa: SIM115 - lives with the process
        self.processes[name] = subprocess.Popen(
            args, cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def start(self) -> None:
        raise NotImplementedError

    def ready(self) -> None:
        """Start at the normal priority (once started, and again after the warm-up for
        what forked in between), and run the warm-up jobs."""
        self.start()
        self.unnice()
        self.warm_up()
        self.unnice()

    def unnice(self) -> None:
        for process in self.processes.values():
            unnice(process.pid)

    def stop(self) -> None:
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes.values():
            process.wait()
        self.processes.clear()

    # --- jobs --------------------------------------------------------------------------
    def warm_up(self) -> None:
        raise NotImplementedError

    def lead(self, jobs: int) -> float:
        """Seconds from now the first job of `jobs` can be due: what the enqueue takes."""
        return 5.0

    def schedule(self, rate: float, jobs: int, at: float, delivery: str) -> None:
        raise NotImplementedError

    def started(self) -> int:
        raise NotImplementedError

    def outcome(self, jobs: int) -> dict:
        """(due, started) a job, and how many ran twice (None: the side cannot tell)."""
        raise NotImplementedError

    def discard(self) -> None:
        """What a run left unstarted, gone (the side's processes stopped)."""


FLUSH_GIN_PENDING = """SELECT gin_clean_pending_list(i.indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
WHERE a.amname = 'gin' AND i.indrelid::regclass::text LIKE 'tasksapp_%'"""


class Tempo(Side):
    name = "tempo"

    def create(self) -> None:
        super().create()
        migrate(self.url)

    def start(self) -> None:
        self.cluster = Cluster(
            database_url=self.url,
            broker_url=self.broker_url,
            queue=f"steady-{uuid.uuid4().hex[:6]}",
            logs=self.logs,
            TEMPO_TUNING_COORDINATION_SECONDS="2",  # bench_cluster's timings for a long run
            TEMPO_CLAIM_TTL_SECONDS="10",
            TEMPO_RUN_LEASE_SECONDS="6",
        )
        self.cluster.dispatcher("dispatcher-1")
        for i in range(WORKERS):
            self.cluster.worker(f"worker-{i + 1}", concurrency=1, pool="prefork")
        self.processes = self.cluster.processes

    def stop(self) -> None:
        self.cluster.stop()
        self.processes = {}

    def warm_up(self) -> None:
        self.first = self._next_id()
        self._insert(WARM_UP, time.time() + 1, 0.05, "at_least_once")
        wait_for(lambda: self.started() >= WARM_UP, timeout=120, message="tempo warm-up")

    def _next_id(self) -> int:
        query = f"{BENCH_TAG} SELECT coalesce(max(id), 0) + 1 FROM tasksapp_job"
        return self.sql.execute(query).fetchone()[0]

    def _insert(self, jobs: int, at: float, step: float, delivery: str) -> None:
        self.sql.execute(
            INSERT, {"handler": NOOP, "at": at, "step": step, "n": jobs, "delivery": delivery}
        )

    def schedule(self, rate, jobs, at, delivery) -> None:
        self.first = self._next_id()
        self._insert(jobs, at, 1 / rate, delivery)
        # The trigram indexes' pending lists hold the insert's entries until a flush
        # (autovacuum's, or the list's limit): done now, the insert's work stays before
        # the window instead of landing in a run at a random moment.
        self.sql.execute(f"{BENCH_TAG} {FLUSH_GIN_PENDING}")

    def started(self) -> int:
        query = f"{BENCH_TAG} SELECT count(started_at) FROM tasksapp_job WHERE id >= %s"
        return self.sql.execute(query, [self.first]).fetchone()[0]

    def outcome(self, jobs) -> dict:
        rows = self.sql.execute(
            f"{BENCH_TAG} SELECT extract(epoch FROM run_at)::float8,"
            " extract(epoch FROM started_at)::float8, attempts"
            " FROM tasksapp_job WHERE id >= %s",
            [self.first],
        ).fetchall()
        return {
            "pairs": [(due, started) for due, started, _ in rows],
            "twice": sum(1 for *_, attempts in rows if attempts > 1),
        }

    def discard(self) -> None:
        self.sql.execute(
            f"{BENCH_TAG} DELETE FROM tasksapp_job WHERE id >= %s AND finished_at IS NULL",
            [self.first],
        )


class StartsInFiles(Side):
    """A peer whose tasks record their starts in files (bench.steady.lags)."""

    def env(self) -> dict[str, str]:
        return {
            **super().env(),
            "STEADY_LAG_DIR": str(self.starts_dir),
            "STEADY_BROKER_URL": self.broker_url,
            "STEADY_DATABASE_URL": self.url,
        }

    def ready(self) -> None:
        self.starts_dir = Path(tempfile.mkdtemp(prefix=f"steady-{self.name}-", dir=self.logs))
        super().ready()

    def warm_up(self) -> None:
        self.send_now([-1 - i for i in range(WARM_UP)])
        wait_for(
            lambda: len(lags.read(self.starts_dir)) >= WARM_UP,
            timeout=120,
            message=f"{self.name} warm-up",
        )

    def send_now(self, keys: list[int]) -> None:
        raise NotImplementedError

    def started(self) -> int:
        return sum(1 for key, *_ in lags.read(self.starts_dir) if key >= 0)

    def outcome(self, jobs) -> dict:
        return report.starts(jobs, [s for s in lags.read(self.starts_dir) if s[0] >= 0])


class CeleryTimer(StartsInFiles):
    name, idle_as = "celery-timer", "celery"

    def start(self) -> None:
        for i in range(WORKERS):
            self.spawn(
                f"worker-{i + 1}",
                [
                    str(BIN / "celery"), "-A", "bench.steady.celery_app", "worker",
                    "-Q", "steady", "-P", "prefork", "-c", "1", "-n", f"worker-{i + 1}@%h",
                    "--without-gossip", "--without-mingle", "--loglevel=WARNING",
                ],
            )  # fmt: skip
        from bench.steady import celery_app

        celery_app.app.conf.broker_url = self.broker_url
        self.task = celery_app.noop

    def send_now(self, keys) -> None:
        for key in keys:
            self.task.delay(key, time.time())

    def schedule(self, rate, jobs, at, delivery) -> None:
        self.spawn(
            "timer-1",
            [sys.executable, "-m", "bench.steady.timer", "--rate", str(rate),
             "--seconds", str(jobs / rate), "--at", str(at)],
        )  # fmt: skip
        self.unnice()

    def stop(self) -> None:
        super().stop()
        redis.Redis.from_url(self.broker_url).flushdb()  # the private broker: what is left


class CeleryEta(CeleryTimer):
    name = "celery-eta"
    SENDS_PER_S = 2000  # apply_async from the bench, for the lead

    def lead(self, jobs: int) -> float:
        return 5.0 + jobs / self.SENDS_PER_S

    def schedule(self, rate, jobs, at, delivery) -> None:
        for key in range(jobs):
            due = at + key / rate
            self.task.apply_async(args=[key, due], eta=epoch(due))
        if time.time() > at:
            print(f"{self.name}: sent after the first was due", file=sys.stderr)


class Procrastinate(StartsInFiles):
    name = "procrastinate"
    BATCH = 5000

    def create(self) -> None:
        super().create()
        from procrastinate.schema import SchemaManager

        self.sql.execute(SchemaManager.get_schema())

    def start(self) -> None:
        from procrastinate import App, PsycopgConnector

        for i in range(WORKERS):
            self.spawn(f"worker-{i + 1}", [sys.executable, "-m", "bench.steady.procrastinate_app"])
        self.app = App(connector=PsycopgConnector(conninfo=self.url))
        self.app.open()

    def stop(self) -> None:
        super().stop()
        self.app.close()

    def _defer(self, jobs: list[tuple[int, float]]) -> None:
        """procrastinate's batch defer, each job at its own schedule_at."""
        made = [
            self.app.configure_task(
                "steady.noop", queue="steady", schedule_at=epoch(due)
            ).make_new_job(key=key, due=due)
            for key, due in jobs
        ]
        for i in range(0, len(made), self.BATCH):
            self.app.job_manager.batch_defer_jobs(jobs=made[i : i + self.BATCH])

    def send_now(self, keys) -> None:
        self._defer([(key, time.time()) for key in keys])

    def lead(self, jobs: int) -> float:
        return 5.0 + jobs / 20_000

    def schedule(self, rate, jobs, at, delivery) -> None:
        self._defer([(key, at + key / rate) for key in range(jobs)])

    def discard(self) -> None:
        self.sql.execute(
            f"{BENCH_TAG} DELETE FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        )


INSERT_DB_TASKS = f"""
INSERT INTO {TABLE} (id, status, enqueued_at, args_kwargs, priority, task_path, worker_ids,
    queue_name, backend_name, run_after, exception_class_path, traceback)
SELECT gen_random_uuid(), 'READY', now(),
    jsonb_build_object('args', jsonb_build_array(%(label)s::text, i), 'kwargs', '{{}}'::jsonb),
    0, 'bench.tasks_backends.tasks.noop', '[]', 'default', 'db',
    to_timestamp(%(at)s + i * %(step)s), '', ''
FROM generate_series(0, %(n)s - 1) AS i
"""  # the row DatabaseBackend.enqueue creates (django_tasks_db/backend.py), one statement


class DjangoTasksDb(Side):
    name = "django-tasks-db"

    def env(self) -> dict[str, str]:
        return {
            **super().env(),
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "BENCH_TASKS_DATABASE_URL": self.url,
            "BENCH_TASKS_BROKER_URL": self.broker_url,
        }

    def create(self) -> None:
        super().create()
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0", "--skip-checks"],
            cwd=ROOT,
            env=self.env(),
            check=True,
        )

    def start(self) -> None:
        for i in range(WORKERS):
            name = f"worker-{i + 1}"
            self.spawn(
                name,
                [sys.executable, "manage.py", "db_worker", "--backend", "db",
                 "--worker-id", name, "-v0"],
            )  # fmt: skip

    def _insert(self, label: str, jobs: int, at: float, step: float) -> None:
        self.label = label
        self.sql.execute(INSERT_DB_TASKS, {"label": label, "at": at, "step": step, "n": jobs})

    def warm_up(self) -> None:
        self._insert("warm-up", WARM_UP, time.time(), 0.01)
        wait_for(lambda: self.started() >= WARM_UP, timeout=120, message="db_worker warm-up")

    def schedule(self, rate, jobs, at, delivery) -> None:
        self._insert(f"run-{uuid.uuid4().hex[:6]}", jobs, at, 1 / rate)

    def started(self) -> int:
        query = (
            f"{BENCH_TAG} SELECT count(started_at) FROM {TABLE} WHERE args_kwargs->'args'->>0 = %s"
        )
        return self.sql.execute(query, [self.label]).fetchone()[0]

    def outcome(self, jobs) -> dict:
        rows = self.sql.execute(
            f"{BENCH_TAG} SELECT extract(epoch FROM run_after)::float8,"
            f" extract(epoch FROM started_at)::float8 FROM {TABLE}"
            " WHERE args_kwargs->'args'->>0 = %s",
            [self.label],
        ).fetchall()
        return {"pairs": rows, "twice": None}  # a task's row is its only record

    def discard(self) -> None:
        self.sql.execute(f"{BENCH_TAG} DELETE FROM {TABLE} WHERE status IN ('READY', 'RUNNING')")


SIDES = {side.name: side for side in (Tempo, CeleryTimer, CeleryEta, DjangoTasksDb, Procrastinate)}
