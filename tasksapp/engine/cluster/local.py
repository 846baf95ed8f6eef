"""The cluster of one instance on the embedded SQLite database: it owns every partition,
finds new work by short polls, and has no peer to tell anything."""

from __future__ import annotations

import time

from tasksapp.engine.clock import ClockOffset
from tasksapp.engine.cluster.partitions import Rebalance
from tasksapp.engine.settings import TempoSettings


class LocalCoordinator:
    def __init__(self, *, partitions: int, instance_id: int) -> None:
        self.partitions = partitions
        self.owned: set[int] = set()
        self.clock = ClockOffset()  # SQLite: the clock is ours
        self.connected = False

    def connect(self) -> None:
        self.owned = set()
        self.connected = True

    def close(self) -> None:
        self.connected = False
        self.owned = set()

    @property
    def served(self) -> set[int]:
        return self.owned  # no peer to hand partitions to

    def rebalance(self, *, adopt_orphans: bool = False) -> Rebalance:
        if self.owned:
            return Rebalance()
        self.owned = set(range(self.partitions))
        return Rebalance(gained=sorted(self.owned))

    def wait(self, timeout: float) -> list[str]:
        time.sleep(max(timeout, 0.0))
        return []


class LocalCluster:
    shared = False

    def coordinator(
        self, *, partitions: int, instance_id: int, coordination_seconds: float, listen: bool
    ) -> LocalCoordinator:
        return LocalCoordinator(partitions=partitions, instance_id=instance_id)

    def liveness_lock(self, name: str, settings: TempoSettings) -> None:
        return None  # one process: nobody to tell of its death

    def notify(self, payload: str) -> None:
        pass  # nobody listens
