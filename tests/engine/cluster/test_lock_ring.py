"""The lock ring against real PostgreSQL sessions: a watcher hears its peer's death once,
also when another watcher waits on the same peer (their views of the ring may differ
for a moment while peers come and go)."""

import time

import psycopg
import pytest

from tasksapp.engine.cluster import sql
from tasksapp.engine.cluster.lock_ring import LockRingWatcher, next_peer
from tests.conftest import THIS_DATABASE, session_params
from tests.processes.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
RING_CLASS = 7_316_099  # a class of the tests' own
PEER = 4242
GONE = "ring-test-gone"


def test_next_peer_is_the_next_key_in_a_ring():
    assert next_peer([5, 1, 9], 5) == 9
    assert next_peer([5, 1, 9], 9) == 1
    assert next_peer([5], 5) is None
    assert next_peer([1, 9], 5) == 9  # its own key need not be live yet


def holder(key: int) -> psycopg.Connection:
    conn = psycopg.connect(**session_params(), autocommit=True)
    conn.execute("SELECT pg_advisory_lock(%s, %s)", [RING_CLASS, key])
    return conn


def waiting_on(listener: psycopg.Connection, key: int) -> int:
    return listener.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        f" AND classid = %s AND objid = %s::oid AND {THIS_DATABASE}",
        [RING_CLASS, key],
    ).fetchone()[0]


def test_two_watchers_of_one_dead_peer_each_hear_it_once():
    """Both wait on PEER; when it dies each is granted, lets go and tells. An exclusive
    wait made each one's moment of holding the dead key look like a live peer to the
    other: they could wait on each other in turn, telling again and again (in one run
    of the exercise's bench, 168,731 times in a few minutes)."""
    peer = holder(PEER)
    listener = psycopg.connect(**session_params(), autocommit=True)
    listener.execute(f"LISTEN {sql.NOTIFY_CHANNEL}")
    watchers = [
        LockRingWatcher(session_params(), lock_class=RING_CLASS, me=me, notify=GONE)
        for me in (1, 2)
    ]
    for watcher in watchers:
        watcher.start()
    try:
        wait_for(lambda: waiting_on(listener, PEER) == 2, timeout=10, message="both waiting")
        peer.close()
        for watcher in watchers:
            assert watcher.peer_gone.wait(5)
        time.sleep(1.0)  # a storm would be thousands by now
        heard = [n.payload for n in listener.notifies(timeout=0.5) if n.payload == GONE]
        assert len(heard) == 2
        # the dead key is no one's: a new owner takes it at once
        assert listener.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", [RING_CLASS, PEER]
        ).fetchone()[0]
    finally:
        for watcher in watchers:
            watcher.stop()
        listener.close()


def test_a_watcher_waiting_is_not_counted_as_a_live_peer():
    peer = holder(PEER)
    watcher = LockRingWatcher(session_params(), lock_class=RING_CLASS, me=1, notify=None)
    watcher.start()
    try:
        with psycopg.connect(**session_params(), autocommit=True) as conn:
            wait_for(lambda: waiting_on(conn, PEER) == 1, timeout=10, message="waiting")
            live = conn.execute(sql.LIVE_LOCK_KEYS, {"lock_class": RING_CLASS}).fetchall()
            assert live == [(PEER,)]
    finally:
        watcher.stop()
        peer.close()
