"""Partition ownership and wake-ups over one dedicated PostgreSQL session.

The session holds a per-instance advisory lock (liveness) and one advisory lock per
owned partition; Postgres releases all of them the moment the process dies. The same
session LISTENs for the job notifications sent by the insert/update trigger — unless the
dispatchers poll only (TEMPO_DISPATCH_NOTIFY=false): then nothing LISTENs, peers coming
and going are seen at the next coordination round, and a dead peer at once by the watcher,
whose instance adopts every orphaned partition until the others take their share.

No partition goes unserved while it changes hands: one released above this instance's
share is still served (polled, claimed: claims are fenced, so two claimers never both
win) until a peer is seen holding it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import psycopg

from tasksapp.engine.clock import ClockOffset
from tasksapp.engine.cluster import sql
from tasksapp.engine.cluster.lock_ring import LockRingWatcher
from tasksapp.engine.cluster.session import session_connection_params

log = logging.getLogger(__name__)


REBALANCE = "rebalance"  # a NOTIFY payload: rebalance partitions now
# Polling only, from the peer watcher: the watched peer ended; take its partitions now.
PEER_GONE = "peer-gone"


def partition_targets(partitions: int, live_pids: list[int], my_pid: int) -> int:
    """How many partitions this instance should own: the shares sum to `partitions`."""
    pids = sorted(set(live_pids) | {my_pid})
    base, extra = divmod(partitions, len(pids))
    return base + (1 if pids.index(my_pid) < extra else 0)


@dataclass
class Rebalance:
    gained: list[int] = field(default_factory=list)  # served from now on
    released: list[int] = field(default_factory=list)  # no longer served: a peer has them
    repartitioned: int | None = None  # the partition count changed to this: start over
    # Fewer partitions free than this instance's share: a dead peer's session may still be
    # letting its locks go, or a peer has yet to release some. Look again soon.
    short: bool = False


STALL_ROUNDS = 10  # a peer that has not coordinated for this many rounds is stalled


class PostgresCoordinator:
    def __init__(
        self,
        *,
        partitions: int,
        instance_id: int,
        coordination_seconds: float = 2.0,
        listen: bool = True,
    ) -> None:
        self.listen = listen  # LISTEN for job and peer notifications on the session
        self.configured_partitions = partitions  # announced to the peers
        self.partitions = partitions  # in use: the largest count announced
        self.instance_id = instance_id
        self.stall_seconds = STALL_ROUNDS * coordination_seconds
        self.owned: set[int] = set()  # locked by this session
        self.handing_over: set[int] = set()  # released, served until a peer locks them
        self.clock = ClockOffset()
        self._conn: psycopg.Connection | None = None
        self._pid = 0
        self._watcher: LockRingWatcher | None = None

    # -- session ----------------------------------------------------------------------
    def connect(self) -> None:
        params = session_connection_params()
        self._conn = psycopg.connect(**params, autocommit=True)
        if self.listen:
            self._conn.execute(f"LISTEN {sql.NOTIFY_CHANNEL}")
        self._conn.execute(
            sql.LOCK_DISPATCHER,
            {
                "dispatcher_class": sql.DISPATCHER_LOCK_CLASS,
                "dispatcher_id": self.instance_id % 2**31,
            },
        )
        self._conn.execute(
            sql.ANNOUNCE_PARTITION_COUNT,
            {"count_class": sql.PARTITION_COUNT_CLASS, "count": self.configured_partitions},
        )
        self._pid = self._conn.info.backend_pid
        self.owned, self.handing_over = set(), set()
        self.clock.reset()
        # A peer's death is heard at once: everyone rebalances (polling only: this one).
        self._watcher = LockRingWatcher(
            params,
            lock_class=sql.DISPATCHER_LOCK_CLASS,
            me=self.instance_id % 2**31,
            notify=REBALANCE if self.listen else None,
            hear_joins=self.listen,
        )
        self._watcher.start()
        if self.listen:  # tell the others a peer joined, so they hand over its share now
            self._conn.execute("SELECT pg_notify(%s, %s)", [sql.NOTIFY_CHANNEL, REBALANCE])

    def close(self) -> None:
        try:
            if self._conn is not None:
                self._conn.close()  # releases every advisory lock at once: first
        finally:
            self._conn = None
            self.owned, self.handing_over = set(), set()
            if self._watcher is not None:
                self._watcher.stop()
                self._watcher = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    @property
    def served(self) -> set[int]:
        """The partitions whose jobs this instance claims now."""
        return self.owned | self.handing_over

    # -- partitions -------------------------------------------------------------------
    def rebalance(self, *, adopt_orphans: bool = False) -> Rebalance:
        """One round: measure the clock, then take free partitions up to our share (all
        of them when adopting a dead peer's orphans) or release the ones above it."""
        assert self._conn is not None
        before = time.time() * 1000
        row = self._conn.execute(
            sql.LIVE_DISPATCHERS_AND_HELD_PARTITIONS,
            {
                "dispatcher_class": sql.DISPATCHER_LOCK_CLASS,
                "partition_class": sql.PARTITION_LOCK_CLASS,
                "count_class": sql.PARTITION_COUNT_CLASS,
            },
        ).fetchone()
        after = time.time() * 1000
        live_pids, held, db_ms, announced = row
        self.clock.observe(before, after, float(db_ms))
        count = max(announced or 0, self.configured_partitions)
        if count != self.partitions:
            return self._repartition(count)
        live_pids = self._without_stalled(list(live_pids or []))
        target = partition_targets(self.partitions, list(live_pids or []), self._pid)
        log.debug(
            "rebalance: live=%s me=%s target=%s owned=%s",
            live_pids,
            self._pid,
            target,
            sorted(self.owned),
        )
        held = set(held or [])
        change = Rebalance(released=sorted(self.handing_over & held))  # handed over now
        self.handing_over -= held
        if len(self.owned) > target:
            self._release(sorted(self.owned)[target:])
        elif len(self.owned) < target or adopt_orphans:
            free = [p for p in range(self.partitions) if p not in held]
            # Peers read the same free list at the same moment: start at our own place in
            # it, and go on past the ones a peer won (each miss would cost a round).
            pids = sorted(set(live_pids or []) | {self._pid})
            start = len(free) * pids.index(self._pid) // len(pids)
            wanted = len(free) if adopt_orphans else target - len(self.owned)
            taken = self.take(free[start:] + free[:start], wanted)
            change.gained = [p for p in taken if p not in self.handing_over]
            self.handing_over -= set(taken)  # ours again: served all along
        change.short = len(self.owned) < target
        return change

    def _release(self, partitions: list[int]) -> None:
        """Unlock partitions above our share for a peer to take, and serve them until one
        does (the round that sees it reports them released): no gap between owners."""
        assert self._conn is not None
        self._conn.execute(
            sql.UNLOCK_PARTITIONS,
            {"partition_class": sql.PARTITION_LOCK_CLASS, "partitions": partitions},
        )
        self.owned -= set(partitions)
        self.handing_over |= set(partitions)

    def _repartition(self, count: int) -> Rebalance:
        """The partition count in use changed: release every partition of the old count
        (a partition number means other jobs now); the next round takes new ones."""
        assert self._conn is not None
        released = sorted(self.served)
        self._conn.execute(
            sql.UNLOCK_PARTITIONS,
            {"partition_class": sql.PARTITION_LOCK_CLASS, "partitions": released},
        )
        log.info("partition count %s -> %s: released %s", self.partitions, count, released)
        self.owned, self.handing_over = set(), set()
        self.partitions = count
        return Rebalance(released=released, repartitioned=count)

    def _without_stalled(self, live_pids: list[int]) -> list[int]:
        """End the sessions of peers stalled past the bound; the live ones remain. Their
        partitions are free once their backends exit (the next round takes them)."""
        assert self._conn is not None
        peers = [pid for pid in live_pids if pid != self._pid]
        if not peers:
            return live_pids
        ended = self._conn.execute(
            sql.TERMINATE_STALLED_PEERS, {"peers": peers, "stall": self.stall_seconds}
        ).fetchall()
        for pid, _ in ended:
            log.warning(
                "dispatcher session %s idle for over %.0f s: ended, its partitions go to the"
                " live instances",
                pid,
                self.stall_seconds,
            )
        stalled = {pid for pid, _ in ended}
        return [pid for pid in live_pids if pid not in stalled]

    def take(self, candidates: list[int], count: int) -> list[int]:
        """Lock up to `count` of the candidate partitions, trying them in order."""
        assert self._conn is not None
        gained: list[int] = []
        for partition in candidates:
            if len(gained) >= count:
                break
            (won,) = self._conn.execute(
                sql.TRY_LOCK_PARTITION,
                {"partition_class": sql.PARTITION_LOCK_CLASS, "partition": partition},
            ).fetchone()
            if won:
                gained.append(partition)
        self.owned |= set(gained)
        return gained

    # -- wake-ups ---------------------------------------------------------------------
    def wait(self, timeout: float) -> list[str]:
        """Block up to `timeout` s for notifications; return their payloads. Polling
        only, the one wake-up is a dead peer (seen by the watcher): `rebalance`."""
        assert self._conn is not None
        if not self.listen:
            return self._wait_for_peer_gone(timeout)
        payloads = [n.payload for n in self._conn.notifies(timeout=max(timeout, 0.0), stop_after=1)]
        if payloads:  # drain whatever else is already there
            payloads += [n.payload for n in self._conn.notifies(timeout=0.0)]
        return payloads

    def _wait_for_peer_gone(self, timeout: float) -> list[str]:
        """Polling only: wake when the watched peer ends (`peer-gone`), so that this
        instance adopts its partitions before the others' next rounds."""
        watcher = self._watcher
        if watcher is None:
            time.sleep(max(timeout, 0.0))
            return []
        if not watcher.peer_gone.wait(max(timeout, 0.0)):
            return []
        watcher.peer_gone.clear()
        return [PEER_GONE]
