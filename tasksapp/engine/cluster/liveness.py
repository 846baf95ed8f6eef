"""A worker process's liveness, as PostgreSQL sees it.

Each worker process holds an advisory lock on its own name, on a session of its own (a
direct connection, past any transaction pooler). PostgreSQL frees the lock the moment
that session ends, so the moment the process dies: SIGKILL, OOM kill, a crash. The
dispatchers look for workers whose lock is gone four times a second
(`tuning.WORKER_CHECK_SECONDS`) and end the leases of their running jobs at once, so
those run again (or become `lost`) within a few hundred ms of the death, instead of when
the run lease (`TEMPO_RUN_LEASE_SECONDS`) would have run out.

A worker that is alive but stalled (SIGSTOP, a paused VM) keeps its session and lock:
its jobs still wait for their leases, and its late outcomes are refused by the fence.

With notifications, each worker process also watches the next one's lock (a lock ring,
tasksapp.engine.cluster.lock_ring, on one more idle connection) and, the moment it is freed,
tells the dispatchers (`worker-gone`) to look now: the four-a-second look is then only
the fallback, for a death no live worker saw (`TEMPO_WORKER_WATCH=false`: it alone).

The key is written on the worker's row (`WorkerProcess.liveness_key`) after the lock is
taken, and only then are jobs started: a worker that holds no lock (another session
holds its name, the database is away) writes no key, and its jobs keep the lease alone.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import psycopg

from tasksapp.engine.cluster import sql
from tasksapp.engine.cluster.lock_ring import LockRingWatcher
from tasksapp.engine.cluster.session import session_connection_params
from tasksapp.engine.models import WorkerProcess
from tasksapp.engine.settings import TempoSettings

log = logging.getLogger(__name__)

RETRY_SECONDS = 2.0  # after a failed take, the next try waits this long (not every batch)


def liveness_lock_possible(settings: TempoSettings) -> bool:
    """With a direct session: behind a transaction pooler without
    TEMPO_SESSION_DATABASE_URL the lock would stay with a pooled server connection."""
    return not settings.db_pooler or bool(settings.session_database_url)


def watches_peers(settings: TempoSettings) -> bool:
    """Whether a worker watches the next one's lock: only dispatchers that LISTEN can
    hear of a death it sees, and only those that check for dead workers act on it."""
    return settings.worker_watch and settings.dispatch_notify and settings.worker_check_seconds > 0


def _connect() -> psycopg.Connection:
    """A session of its own for the lock: direct, past any transaction pooler."""
    return psycopg.connect(
        **session_connection_params(), autocommit=True, application_name="tempo-worker"
    )


class LivenessLock:
    """The session holding this worker process's liveness lock (see the module)."""

    def __init__(self, name: str, *, watch_peers: bool = False) -> None:
        self.name = name
        self.watch_peers = watch_peers  # start a LockRingWatcher once the lock is held
        self._watcher: LockRingWatcher | None = None
        self._conn: psycopg.Connection | None = None
        self.key: int | None = None
        self._retry_at = 0.0  # time.monotonic() of the next try after a failed one
        # The lease keeper and every thread starting a batch may ask at once: one session.
        self._guard = threading.Lock()

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._conn.closed and self.key is not None

    def ensure(self, queues: list[str] | None = None) -> bool:
        """Hold the lock (again, after the session was lost) and register its key on the
        worker's row (with the queues it serves, when it is created); whether it is held.
        Touches the session, so a broken one is noticed here."""
        with self._guard:
            return self._ensure(queues or [])

    def _ensure(self, queues: list[str]) -> bool:
        if self.held:
            try:
                self._conn.execute("SELECT 1")
                return True
            except psycopg.Error:
                log.warning("worker %s: liveness session lost, taking the lock again", self.name)
                self._close()
        if time.monotonic() < self._retry_at:
            return False
        if self._take(queues):
            return True
        self._retry_at = time.monotonic() + RETRY_SECONDS
        return False

    def _take(self, queues: list[str]) -> bool:
        try:
            self._conn = _connect()
            params = {"worker_class": sql.WORKER_LOCK_CLASS, "name": self.name}
            got, key = self._conn.execute(sql.TAKE_WORKER_LOCK, params).fetchone()
        except psycopg.Error as exc:
            log.warning("worker %s: no liveness lock (%s): leases alone", self.name, exc)
            self._close()
            return False
        if not got:  # another live session holds this name's lock: leave it alone
            log.warning("worker %s: its liveness lock is held elsewhere: leases alone", self.name)
            self._close()
            return False
        self.key = key
        if self.watch_peers and self._watcher is None:
            self._watcher = LockRingWatcher(
                session_connection_params(),
                lock_class=sql.WORKER_LOCK_CLASS,
                me=key,
                notify=sql.WORKER_GONE,
                name="worker-watcher",
            )
            self._watcher.start()
        WorkerProcess.objects.update_or_create(
            name=self.name,
            defaults={"liveness_key": key},
            create_defaults={
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "liveness_key": key,
                "queues": queues,
            },
        )
        return True

    def close(self) -> None:
        with self._guard:
            if self._watcher is not None:
                self._watcher.stop()
                self._watcher = None
            self._close()

    def _close(self) -> None:
        self.key = None
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
