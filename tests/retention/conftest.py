import pytest

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
}


@pytest.fixture
def retention(settings):
    """Retention with small batches (several statements per run) and no rollup delay."""
    settings.TEMPO_RETENTION = dict(FAST)
    return settings.TEMPO_RETENTION
