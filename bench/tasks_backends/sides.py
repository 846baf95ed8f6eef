"""The two backends behind one small interface: start, kill and stop their worker
processes, enqueue the bench's tasks through the Tasks API, and read back their rows.
Each process leads a session of its own (a kill reaches a worker's pool children too; the
CPU helper finds them by session)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT

SETTINGS = "bench.tasks_backends.settings"
TABLE = "django_tasks_database_dbtaskresult"  # DBTaskResult's (app label django_tasks_database)


class Side:
    """One backend: its TASKS alias, its processes, its table of results."""

    name = label = alias = ""
    SELECT = ""  # key, status, run_after, started_at, finished_at (epochs) of a label

    def __init__(self, *, env: dict[str, str], logs: Path, slots: int) -> None:
        self.env, self.logs, self.slots = env, logs, slots
        self.processes: dict[str, subprocess.Popen] = {}
        self.generation = 0
        self.killed: set[str] = set()

    # --- processes ---------------------------------------------------------------
    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.logs / f"{self.name}-{name}.log", "ab")  # noqa: SIM115 - lives with the process
        self.processes[name] = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start(self) -> None:
        """The backend's processes, workers included."""
        self.start_workers()

    def start_workers(self) -> None:
        raise NotImplementedError

    def worker_names(self) -> list[str]:
        return [name for name in self.processes if name.startswith("w")]

    def kill_workers(self) -> None:
        """SIGKILL every worker process (its whole session), as a machine's death would."""
        for name in self.worker_names():
            process = self.processes.pop(name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            self.killed.add(name)

    def stop(self) -> None:
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes.values())

    # --- tasks and rows ------------------------------------------------------------
    def enqueue(self, task, label: str, keys, run_after: list | None = None, **kwargs) -> None:
        """`task(label, key, **kwargs)` for each key, through this backend's Tasks API,
        each at its `run_after` (datetimes) when given."""
        bound = task.using(backend=self.alias)
        for key, due in zip(keys, run_after or [None] * len(keys), strict=True):
            (bound.using(run_after=due) if due else bound).enqueue(label, key, **kwargs)

    def rows(self, label: str) -> list[tuple]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(self.SELECT, [label])
            return cursor.fetchall()

    def finished(self, label: str) -> int:
        return sum(1 for row in self.rows(label) if row[1] in ("SUCCESSFUL", "FAILED"))

    def stuck(self, label: str) -> bool:
        """Whether nothing will ever run again of `label` (only django-tasks-db knows)."""
        return False

    def cut_runs(self, label: str) -> int:
        """Runs of `label` a kill cut short."""
        raise NotImplementedError

    def _one(self, sql: str, params: list) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()[0]


class TempoSide(Side):
    """A dispatcher (`manage.py tempo_dispatcher`) and a worker (`manage.py tempo_worker`,
    prefork pool of `slots` processes)."""

    name, alias = "tempo", "default"
    SELECT = """
    SELECT (payload->'args'->>1)::int, state, extract(epoch FROM run_at),
        extract(epoch FROM started_at), extract(epoch FROM finished_at)
    FROM tasksapp_job WHERE payload->'args'->>0 = %s
    """

    @property
    def label(self) -> str:
        return f"tempo (1 dispatcher, 1 worker: prefork ×{self.slots})"

    def start(self) -> None:
        self._start("dispatcher", ["tempo_dispatcher", "--name", "d1"])
        self.start_workers()

    def start_workers(self) -> None:
        self.generation += 1
        name = f"w{self.generation}"
        self._start(
            name,
            [
                "tempo_worker",
                "--pool",
                "prefork",
                "--concurrency",
                str(self.slots),
                "--loglevel",
                "WARNING",
                "--hostname",
                f"{name}@%h",
            ],
        )

    def cut_runs(self, label: str) -> int:
        """The `lost_run` entries of the jobs: each a run lost with its worker, run again."""
        return self._one(
            "SELECT count(*) FROM tasksapp_job, jsonb_array_elements(errors) AS e"
            " WHERE payload->'args'->>0 = %s AND e->>'kind' = 'lost_run'",
            [label],
        )

    def rows(self, label: str) -> list[tuple]:
        from tasksapp.backends.results import STATUSES

        return [(k, str(STATUSES[s]), *rest) for k, s, *rest in super().rows(label)]


class DatabaseSide(Side):
    """`slots` processes of `manage.py db_worker` (each runs one task at a time), its
    default polling interval (1 s) unless `interval` says otherwise."""

    name, alias = "django-tasks-db", "db"
    SELECT = f"""
    SELECT (args_kwargs->'args'->>1)::int, status, extract(epoch FROM run_after),
        extract(epoch FROM started_at), extract(epoch FROM finished_at)
    FROM {TABLE} WHERE args_kwargs->'args'->>0 = %s
    """

    def __init__(self, *, interval: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.interval = interval

    @property
    def label(self) -> str:
        return f"django-tasks-db ({self.slots} × db_worker, interval {self.interval:g} s)"

    def start_workers(self) -> None:
        self.generation += 1
        for i in range(self.slots):
            name = f"w{self.generation}-{i + 1}"
            self._start(
                name,
                [
                    "db_worker",
                    "--backend",
                    self.alias,
                    "--interval",
                    str(self.interval),
                    "--worker-id",
                    name,
                    "-v0",
                ],
            )

    def cut_runs(self, label: str) -> int:
        """Tasks claimed last by a worker since killed and not finished: RUNNING for good."""
        return self._one(
            f"SELECT count(*) FROM {TABLE} WHERE args_kwargs->'args'->>0 = %s"
            " AND status = 'RUNNING' AND worker_ids->>-1 = ANY(%s)",
            [label, sorted(self.killed)],
        )

    def stuck(self, label: str) -> bool:
        """Nothing READY, and each RUNNING task claimed last by a worker since killed:
        django-tasks-db has nothing that runs such a task again."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT status, worker_ids->>-1 FROM {TABLE}"
                " WHERE args_kwargs->'args'->>0 = %s AND status IN ('READY', 'RUNNING')",
                [label],
            )
            pending = cursor.fetchall()
        return all(status == "RUNNING" and worker in self.killed for status, worker in pending)
