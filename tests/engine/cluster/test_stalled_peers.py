"""A peer dispatcher whose coordination session sat idle past the stall bound (frozen by
SIGSTOP, a paused VM, a half-open connection) is ended, so its partitions are taken over;
a peer that coordinates on time is left alone."""

from __future__ import annotations

import time

import psycopg
import pytest

from tasksapp.engine.cluster import sql
from tasksapp.engine.cluster.partitions import STALL_ROUNDS, PostgresCoordinator
from tests.conftest import session_params

pytestmark = pytest.mark.django_db(transaction=True)
ROUND_S = 0.1  # coordination_seconds: the stall bound is STALL_ROUNDS rounds, 1 s


def _peer(instance_id: int, partitions: list[int]) -> psycopg.Connection:
    """A session holding what a dispatcher holds: its instance lock and partitions."""
    peer = psycopg.connect(**session_params(), autocommit=True)
    peer.execute(
        sql.LOCK_DISPATCHER,
        {"dispatcher_class": sql.DISPATCHER_LOCK_CLASS, "dispatcher_id": instance_id},
    )
    for partition in partitions:
        peer.execute("SELECT pg_advisory_lock(%s, %s)", [sql.PARTITION_LOCK_CLASS, partition])
    return peer


@pytest.fixture
def coordinator():
    coordinator = PostgresCoordinator(
        partitions=16, instance_id=515151, coordination_seconds=ROUND_S
    )
    coordinator.connect()
    yield coordinator
    coordinator.close()


def test_the_stall_bound_is_ten_rounds(coordinator):
    assert coordinator.stall_seconds == pytest.approx(STALL_ROUNDS * ROUND_S)


def test_a_stalled_peer_is_ended_and_its_partitions_taken(coordinator):
    stalled = _peer(616161, list(range(8)))
    try:
        coordinator.rebalance()
        assert len(coordinator.owned) == 8  # its share while the peer looks alive
        time.sleep(coordinator.stall_seconds + 0.5)  # the peer says nothing
        coordinator.rebalance()  # ends the peer's session
        deadline = time.monotonic() + 5
        while len(coordinator.owned) < 16 and time.monotonic() < deadline:
            time.sleep(0.1)
            coordinator.rebalance()
        assert coordinator.owned == set(range(16))
        with pytest.raises(psycopg.OperationalError):
            stalled.execute("SELECT 1")  # the frozen one finds its session gone
    finally:
        stalled.close()


def test_a_peer_that_coordinates_on_time_keeps_its_partitions(coordinator):
    live = _peer(717171, list(range(8)))
    try:
        for _ in range(int(coordinator.stall_seconds / ROUND_S) + 5):
            live.execute("SELECT 1")  # a round of its own
            coordinator.rebalance()
            time.sleep(ROUND_S)
        assert len(coordinator.owned) == 8
        assert live.execute("SELECT 1").fetchone() == (1,)
    finally:
        live.close()
