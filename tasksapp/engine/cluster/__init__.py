"""The cluster: what the engine's processes share with their peers through the database.

Several dispatchers share the partitions of the work, hear of new work and of each other,
and see a worker process die the moment it does. On PostgreSQL that is advisory locks,
LISTEN/NOTIFY and the lock rings (`PostgresCluster`, postgres.py); on the embedded SQLite
database a single instance owns everything and polls (`LocalCluster`, local.py). Both
answer the one protocol of base.py, and nothing else in the engine uses these features
or asks which database it runs on to decide whether it may.

    partitions.py  partition ownership and wake-ups (`PostgresCoordinator`)
    lock_ring.py   each process watches the next one's lock (`LockRingWatcher`)
    liveness.py    a worker process's liveness lock (`LivenessLock`)
    sql.py         the statements, lock classes and notification payloads
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tasksapp.engine.db import on_postgres

if TYPE_CHECKING:
    from tasksapp.engine.cluster.base import Cluster


def cluster() -> Cluster:
    """The cluster of Tempo's database."""
    # Imported here: the job store's statements import sql.py from this package.
    from tasksapp.engine.cluster.local import LocalCluster
    from tasksapp.engine.cluster.postgres import PostgresCluster

    return PostgresCluster() if on_postgres() else LocalCluster()
