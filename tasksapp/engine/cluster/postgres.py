"""The cluster on PostgreSQL: advisory locks, LISTEN/NOTIFY, the lock rings."""

from __future__ import annotations

from tasksapp.engine.cluster import sql
from tasksapp.engine.cluster.liveness import LivenessLock, liveness_lock_possible, watches_peers
from tasksapp.engine.cluster.partitions import PostgresCoordinator
from tasksapp.engine.db import tempo_connection
from tasksapp.engine.settings import TempoSettings


class PostgresCluster:
    shared = True

    def coordinator(
        self, *, partitions: int, instance_id: int, coordination_seconds: float, listen: bool
    ) -> PostgresCoordinator:
        return PostgresCoordinator(
            partitions=partitions,
            instance_id=instance_id,
            coordination_seconds=coordination_seconds,
            listen=listen,
        )

    def liveness_lock(self, name: str, settings: TempoSettings) -> LivenessLock | None:
        if not liveness_lock_possible(settings):
            return None
        return LivenessLock(name, watch_peers=watches_peers(settings))

    def notify(self, payload: str) -> None:
        with tempo_connection().cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [sql.NOTIFY_CHANNEL, payload])
