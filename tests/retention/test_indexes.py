"""Retention rebuilds the jobs table's bloated indexes, and only those; what an interrupted
rebuild left is dropped. The bloat estimate is checked against real fresh builds."""

from __future__ import annotations

import dataclasses

import pytest
from django.db import connection

from tasksapp.retention.indexes import index_bloat, index_rebuild_bloated, indexes_to_rebuild
from tasksapp.retention.settings import RetentionSettings, retention_settings
from tasksapp.retention.store import IndexStats, retention_store
from tests.retention.conftest import ON_POSTGRES

pytestmark = pytest.mark.skipif(not ON_POSTGRES, reason="indexes are rebuilt on PostgreSQL")

FILL = """
INSERT INTO tasksapp_job (handler, payload, run_at, finished_at, state, attempts,
    max_attempts, retry_policy, delivery, idempotency_key, lease_token, claimed_by,
    last_error, errors, queue, priority, concurrency_key)
SELECT 'tests.handlers.recording.noop', '{}', now() - i * interval '1 s',
    now() - i * interval '1 s', 'succeeded', 1, 1, '{}', 'transactional', 'bloat:' || i, 1,
    '', '', '[]', 'default', 5, ''
FROM generate_series(1, %(rows)s) AS i
"""
ROWS = 5_000


def _sizes() -> dict[str, int]:
    return {index.name: index.size_bytes for index in retention_store().job_indexes()}


def _vacuum() -> None:
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE tasksapp_job")


def _settings(**changes) -> RetentionSettings:
    return dataclasses.replace(retention_settings(), **changes)


def test_the_estimate_is_the_ratio_to_a_fresh_build():
    # 8-byte keys: 20 bytes an entry, 366 on a leaf filled to 90 %: 110 leaves, a root
    # above them and the metapage.
    fresh = IndexStats("i", size_bytes=8192 * 112, entries=40_000, width=8)
    assert index_bloat(fresh) == pytest.approx(1.0, abs=0.05)
    assert index_bloat(dataclasses.replace(fresh, size_bytes=8192 * 336)) == pytest.approx(
        3.0, 0.05
    )
    assert index_bloat(dataclasses.replace(fresh, width=None)) is None  # no statistics yet
    assert index_bloat(dataclasses.replace(fresh, entries=-1)) is None  # never counted


def test_only_large_bloated_indexes_are_chosen_and_zero_turns_it_off():
    big, mb = 8192 * 336, 2**20
    indexes = [
        IndexStats("bloated", big, 40_000, 8),
        IndexStats("fresh", 8192 * 112, 40_000, 8),
        IndexStats("small", 8192 * 30, 1_000, 8),
    ]
    cfg = _settings(reindex_bloat=1.5, reindex_min_mb=big / mb / 2)
    assert indexes_to_rebuild(indexes, cfg) == ["bloated"]
    assert indexes_to_rebuild(indexes, _settings(reindex_bloat=0, reindex_min_mb=0)) == []


@pytest.mark.django_db(transaction=True)
def test_bloated_indexes_are_rebuilt_to_their_fresh_size_and_then_left_alone():
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"rows": ROWS})
        cursor.execute("DELETE FROM tasksapp_job WHERE id % 50 <> 0")  # a few rows pin pages
    _vacuum()
    before = _sizes()
    cfg = _settings(reindex_bloat=1.5, reindex_min_mb=0.05)
    estimate = {index.name: index_bloat(index) for index in retention_store().job_indexes()}

    rebuilt = index_rebuild_bloated(cfg=cfg)

    after = _sizes()
    assert "tasksapp_job_pkey" in rebuilt and "job_finished_at_idx" in rebuilt
    for name in rebuilt:
        assert estimate[name] >= 1.5
        assert after[name] * 5 < before[name], name  # 1 row in 50 is left
    _vacuum()
    left = {index.name: index_bloat(index) for index in retention_store().job_indexes()}
    assert all(left[name] < 1.2 for name in rebuilt), left  # the estimate of a fresh build
    assert index_rebuild_bloated(cfg=cfg) == []


@pytest.mark.django_db(transaction=True)
def test_what_an_interrupted_rebuild_left_is_dropped():
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"rows": 10})
        # A unique build over duplicates fails and leaves its index invalid, as an
        # interrupted REINDEX CONCURRENTLY leaves `<name>_ccnew`.
        with pytest.raises(Exception, match="could not create unique index"):
            cursor.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY job_state_run_at_idx_ccnew"
                " ON tasksapp_job (state)"
            )
    assert retention_store().drop_failed_rebuilds() == ["job_state_run_at_idx_ccnew"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname LIKE '%_ccnew'")
        assert cursor.fetchone()[0] == 0


@pytest.mark.django_db
def test_no_rebuild_inside_a_transaction():
    """REINDEX CONCURRENTLY cannot run in one: a run inside one skips the step."""
    assert index_rebuild_bloated(cfg=_settings(reindex_bloat=1.2, reindex_min_mb=0)) == []
