import pytest
from django.db import connection

from tasksapp.retention import store as retention_stores

ON_POSTGRES = connection.vendor == "postgresql"

FAST = {
    "SUCCEEDED_DAYS": 7,
    "CANCELLED_DAYS": 30,
    "DEAD_DAYS": 30,
    "LOST_DAYS": 30,
    "HANDLER_DAYS": {"tests.handlers.recording.noop": {"succeeded": 2, "dead": 60}},
    "SLICE_PLAN_DAYS": 30,
    "GRAPH_RUN_DAYS": 30,
    "AUDIT_DAYS": 365,
    "HEARTBEAT_DAYS": 7,
    "COUNTER_DAYS": 14,
    "MINUTE_ROLLUP_DAYS": 14,
    "HOUR_ROLLUP_DAYS": 400,
    "ROLLUP_DELAY_SECONDS": 0,
    "BATCH_SIZE": 3,
    "BATCH_PAUSE_SECONDS": 0,
    "REINDEX_BLOAT": 1.5,
    "REINDEX_MIN_MB": 32,
}


@pytest.fixture
def retention(settings):
    """Retention with small batches (several statements per run) and no rollup delay."""
    settings.TEMPO_RETENTION = dict(FAST)
    return settings.TEMPO_RETENTION


@pytest.fixture(params=["postgres", "orm"])
def store(request, monkeypatch):
    """Each test runs with both retention stores (the ORM one is SQLite's, and runs on the
    test database too); on SQLite only the ORM one."""
    if request.param == "postgres" and not ON_POSTGRES:
        pytest.skip("the PostgreSQL statements need PostgreSQL")
    chosen = {
        "postgres": retention_stores.PostgresRetentionStore,
        "orm": retention_stores.SqliteRetentionStore,
    }[request.param]()
    for module in ("tasksapp.retention.services", "tasksapp.retention.history"):
        monkeypatch.setattr(f"{module}.retention_store", lambda: chosen)
    return request.param
