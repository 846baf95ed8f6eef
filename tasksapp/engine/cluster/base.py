"""The cluster's protocol: what a dispatcher and a worker ask of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tasksapp.engine.clock import ClockOffset
    from tasksapp.engine.cluster.liveness import LivenessLock
    from tasksapp.engine.cluster.partitions import Rebalance
    from tasksapp.engine.settings import TempoSettings


class Coordinator(Protocol):
    """One dispatcher's share of the partitions, and its wait for work or peers."""

    partitions: int
    clock: ClockOffset  # the database clock, as this dispatcher sees it

    @property
    def connected(self) -> bool: ...

    @property
    def served(self) -> set[int]: ...

    def connect(self) -> None: ...

    def close(self) -> None: ...

    def rebalance(self, *, adopt_orphans: bool = False) -> Rebalance:
        """Take this instance's share of the partitions, release what is over it."""

    def wait(self, timeout: float) -> list[str]:
        """Wait up to `timeout` s for notifications; their payloads."""


class Cluster(Protocol):
    # Whether instances share the work through the database (partitions, notifications,
    # liveness locks); if not, one instance owns every partition and polls.
    shared: bool

    def coordinator(
        self, *, partitions: int, instance_id: int, coordination_seconds: float, listen: bool
    ) -> Coordinator:
        """A dispatcher's coordinator; `listen`: it hears work and peers by notification."""

    def liveness_lock(self, name: str, settings: TempoSettings) -> LivenessLock | None:
        """The lock that tells the dispatchers the moment this worker process dies; None
        where there is none (the worker's jobs keep their leases alone)."""

    def notify(self, payload: str) -> None:
        """Tell every listening dispatcher now (a routing change, a worker's death)."""
