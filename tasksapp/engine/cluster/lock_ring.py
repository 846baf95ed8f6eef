"""Learning the moment a peer process dies, without polling: a ring of lock waits.

Dispatchers and worker processes each hold a session-level advisory lock of their kind
(a lock class) for as long as they live; PostgreSQL frees it the moment the session
ends: SIGKILL, a crash, a graceful stop alike. Each one also waits, on a connection of
its own, for the lock of the next live peer of its kind (ring order by key). When that
wait is granted the peer is dead: the watcher lets the lock go at once, tells the others
(a NOTIFY payload) and its own process (`peer_gone`), and watches the next peer. A lock
timeout makes it look at the ring again as peers come and go. Cost: one idle connection.
"""

from __future__ import annotations

import contextlib
import logging
import threading

import psycopg

from tasksapp.engine.cluster import sql

log = logging.getLogger(__name__)

LOOK_AGAIN_SECONDS = 5  # the lock wait's timeout: peers that came meanwhile are seen then
ALONE_SECONDS = 2.0  # with no peer to watch, look again this soon


def next_peer(peers: list[int], me: int) -> int | None:
    """The peer this one watches: the next key after its own, in a ring."""
    others = sorted(set(peers) - {me})
    if not others:
        return None
    return next((p for p in others if p > me), others[0])


class LockRingWatcher:
    """Waits on the next live peer's lock of `lock_class` (see the module); on its death
    sends `notify` (a payload on the engine's channel, when given) and sets `peer_gone`.
    `hear_joins`: while alone, wake on the channel's notifications (a peer announcing
    itself) rather than only every ALONE_SECONDS."""

    def __init__(
        self,
        params: dict,
        *,
        lock_class: int,
        me: int,
        notify: str | None,
        hear_joins: bool = False,
        name: str = "peer-watcher",
    ) -> None:
        self._params = params
        self._class = lock_class
        self._me = me
        self._notify = notify
        self._hear_joins = hear_joins
        self.peer_gone = threading.Event()  # set when the watched peer ended
        self._stop = threading.Event()
        self._conn: psycopg.Connection | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.cancel()  # interrupt the lock wait
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(**self._params, autocommit=True) as conn:
                    self._conn = conn
                    conn.execute(f"SET lock_timeout = '{LOOK_AGAIN_SECONDS}s'")
                    if self._hear_joins:
                        conn.execute(f"LISTEN {sql.NOTIFY_CHANNEL}")
                    while not self._stop.is_set():
                        self._watch_once(conn)
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.debug("%s: %s", self._thread.name, exc)
                    self._stop.wait(1.0)
            finally:
                self._conn = None

    def _watch_once(self, conn: psycopg.Connection) -> None:
        live = conn.execute(sql.LIVE_LOCK_KEYS, {"lock_class": self._class}).fetchall()
        peer = next_peer([row[0] for row in live], self._me)
        if peer is None:
            self._wait_alone(conn)
            return
        key = {"lock_class": self._class, "key": peer}
        try:
            conn.execute(sql.WAIT_FOR_LOCK, key)  # returns when the peer is gone
        except psycopg.errors.LockNotAvailable:
            return  # still alive: look at the ring again
        conn.execute(sql.UNLOCK_KEY, key)  # at once: the peer's key is no one's to hold
        if self._notify is not None:
            conn.execute("SELECT pg_notify(%s, %s)", [sql.NOTIFY_CHANNEL, self._notify])
        self.peer_gone.set()
        log.info("%s: peer %s is gone", self._thread.name, peer)

    def _wait_alone(self, conn: psycopg.Connection) -> None:
        if self._hear_joins:
            for _ in conn.notifies(timeout=ALONE_SECONDS, stop_after=1):
                pass
        else:
            self._stop.wait(ALONE_SECONDS)
