"""Partition ownership and wake-ups over one dedicated PostgreSQL session.

The session holds a per-instance advisory lock (liveness) and one advisory lock per
owned partition; Postgres releases all of them the moment the process dies. The same
session LISTENs for the job notifications sent by the insert/update trigger.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import psycopg
from django.db import connection

from tasksapp import sql

log = logging.getLogger(__name__)


def partition_targets(partitions: int, live_pids: list[int], my_pid: int) -> int:
    """How many partitions this instance should own: the shares sum to `partitions`."""
    pids = sorted(set(live_pids) | {my_pid})
    base, extra = divmod(partitions, len(pids))
    return base + (1 if pids.index(my_pid) < extra else 0)


@dataclass
class Rebalance:
    gained: list[int] = field(default_factory=list)
    released: list[int] = field(default_factory=list)


class PostgresCoordinator:
    def __init__(self, *, partitions: int, instance_id: int) -> None:
        self.partitions = partitions
        self.instance_id = instance_id
        self.owned: set[int] = set()
        self.offset_ms = 0.0
        self._best_rtt = float("inf")
        self._conn: psycopg.Connection | None = None
        self._pid = 0

    # -- session ----------------------------------------------------------------------
    def connect(self) -> None:
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        self._conn = psycopg.connect(**params, autocommit=True)
        self._conn.execute(f"LISTEN {sql.NOTIFY_CHANNEL}")
        self._conn.execute(
            sql.LOCK_DISPATCHER,
            {
                "dispatcher_class": sql.DISPATCHER_LOCK_CLASS,
                "dispatcher_id": self.instance_id % 2**31,
            },
        )
        self._pid = self._conn.info.backend_pid
        self.owned = set()
        self._best_rtt = float("inf")

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()  # releases every advisory lock at once
            finally:
                self._conn = None
                self.owned = set()

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    # -- partitions -------------------------------------------------------------------
    def rebalance(self) -> Rebalance:
        """One round: measure the clock, then take free partitions up to our share or
        release the ones above it."""
        assert self._conn is not None
        before = time.time() * 1000
        row = self._conn.execute(
            sql.LIVE_DISPATCHERS_AND_HELD_PARTITIONS,
            {
                "dispatcher_class": sql.DISPATCHER_LOCK_CLASS,
                "partition_class": sql.PARTITION_LOCK_CLASS,
            },
        ).fetchone()
        after = time.time() * 1000
        live_pids, held, db_ms = row
        self._observe_clock(before, after, float(db_ms))
        target = partition_targets(self.partitions, list(live_pids or []), self._pid)
        log.debug(
            "rebalance: live=%s me=%s target=%s owned=%s",
            live_pids,
            self._pid,
            target,
            sorted(self.owned),
        )
        change = Rebalance()
        if len(self.owned) > target:
            change.released = sorted(self.owned)[target:]
            self._conn.execute(
                sql.UNLOCK_PARTITIONS,
                {"partition_class": sql.PARTITION_LOCK_CLASS, "partitions": change.released},
            )
            self.owned -= set(change.released)
        elif len(self.owned) < target:
            free = [p for p in range(self.partitions) if p not in set(held or [])]
            wanted = free[: target - len(self.owned)]
            if wanted:
                rows = self._conn.execute(
                    sql.TRY_LOCK_PARTITIONS,
                    {
                        "partition_class": sql.PARTITION_LOCK_CLASS,
                        "candidates": wanted,
                    },
                ).fetchall()
                change.gained = [r[0] for r in rows]
                self.owned |= set(change.gained)
        return change

    def _observe_clock(self, before: float, after: float, db_ms: float) -> None:
        rtt = after - before
        # Keep the sample with the smallest round trip; let it age so drift is followed.
        self._best_rtt *= 1.05
        if rtt <= self._best_rtt:
            self._best_rtt = rtt
            self.offset_ms = db_ms - (before + after) / 2

    # -- wake-ups ---------------------------------------------------------------------
    def wait(self, timeout: float) -> list[str]:
        """Block up to `timeout` s for notifications; return their payloads."""
        assert self._conn is not None
        payloads = [n.payload for n in self._conn.notifies(timeout=max(timeout, 0.0), stop_after=1)]
        if payloads:  # drain whatever else is already there
            payloads += [n.payload for n in self._conn.notifies(timeout=0.0)]
        return payloads


class LocalCoordinator:
    """Without PostgreSQL (embedded SQLite): one instance owns every partition and finds
    new work by short polls."""

    def __init__(self, *, partitions: int, instance_id: int) -> None:
        self.partitions = partitions
        self.owned: set[int] = set()
        self.offset_ms = 0.0
        self.connected = False

    def connect(self) -> None:
        self.owned = set()
        self.connected = True

    def close(self) -> None:
        self.connected = False
        self.owned = set()

    def rebalance(self) -> Rebalance:
        if self.owned:
            return Rebalance()
        self.owned = set(range(self.partitions))
        return Rebalance(gained=sorted(self.owned))

    def wait(self, timeout: float) -> list[str]:
        time.sleep(max(timeout, 0.0))
        return []
