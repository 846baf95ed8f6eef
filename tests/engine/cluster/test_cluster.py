"""The cluster's one protocol and its two implementations; the PostgreSQL-only features
(advisory locks, notifications, pg_locks) and the vendor checks each in one place."""

import ast
import dataclasses
import re
from pathlib import Path

import psycopg
import pytest

from tasksapp.engine.cluster import cluster, sql
from tasksapp.engine.cluster.local import LocalCluster, LocalCoordinator
from tasksapp.engine.cluster.postgres import PostgresCluster
from tasksapp.engine.cluster.session import session_connection_params
from tasksapp.engine.settings import TempoSettings

TASKSAPP = Path(__file__).resolve().parents[3] / "tasksapp"
CLUSTER = TASKSAPP / "engine" / "cluster"
ASKS_THE_VENDOR = TASKSAPP / "engine" / "db.py"
CLUSTER_SQL = re.compile(
    r"pg_notify|\bLISTEN \{|pg_(try_)?advisory_(un)?lock(_shared)?\(|pg_locks|pg_terminate_backend"
)


def sources(exclude: Path | None = None) -> list[Path]:
    files = [p for p in TASKSAPP.rglob("*.py") if "migrations" not in p.parts]
    return [p for p in files if exclude is None or not p.is_relative_to(exclude)]


def test_only_the_database_module_asks_the_vendor():
    askers = []
    for path in sources():
        if path == ASKS_THE_VENDOR:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "vendor":
                askers.append(f"{path.relative_to(TASKSAPP)}:{node.lineno}")
    assert askers == []


def test_cluster_statements_live_in_the_cluster_package():
    outside = [
        str(path.relative_to(TASKSAPP))
        for path in sources(exclude=CLUSTER)
        if CLUSTER_SQL.search(path.read_text())
    ]
    assert outside == []


def test_the_local_cluster_owns_every_partition_and_tells_nobody():
    local = LocalCluster()
    coordinator = local.coordinator(
        partitions=4, instance_id=1, coordination_seconds=2.0, listen=True
    )
    assert isinstance(coordinator, LocalCoordinator)
    coordinator.connect()
    assert coordinator.rebalance().gained == [0, 1, 2, 3]
    assert coordinator.served == {0, 1, 2, 3}
    assert coordinator.rebalance().gained == []  # no peer: nothing changes hands
    assert local.liveness_lock("host:1", TempoSettings.load()) is None
    assert local.shared is False


@pytest.mark.django_db(transaction=True)
def test_postgres_is_the_shared_cluster_and_its_notifications_are_heard():
    chosen = cluster()
    assert isinstance(chosen, PostgresCluster) and chosen.shared
    with psycopg.connect(**session_connection_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {sql.NOTIFY_CHANNEL}")
        chosen.notify("cluster-test")
        heard = [n.payload for n in listener.notifies(timeout=2.0, stop_after=1)]
    assert heard == ["cluster-test"]


def test_a_pooled_session_without_a_direct_url_takes_no_liveness_lock():
    pooled = dataclasses.replace(
        TempoSettings.load(), db_pooler="transaction", prepared_statements=False
    )
    assert PostgresCluster().liveness_lock("host:1", pooled) is None
    direct = dataclasses.replace(pooled, session_database_url="postgres://db/tempo")
    assert PostgresCluster().liveness_lock("host:1", direct) is not None  # not taken yet
