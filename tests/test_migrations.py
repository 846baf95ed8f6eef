"""Migrations that change data: run them forwards and backwards on real rows."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("tasksapp", "0009_merge_dispatch_mode_graphs")]
AFTER = [("tasksapp", "0010_handler_paths_by_feature")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_to_latest() -> None:
    """Leave the test database as every other test expects it: fully migrated."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_handler_paths_of_moved_modules_are_renamed_both_ways():
    apps = migrate(BEFORE)
    Job = apps.get_model("tasksapp", "Job")
    old = Job.objects.create(handler="tasksapp.demo.greet", run_at=timezone.now())
    planned = Job.objects.create(
        handler="tasksapp.planning.handlers.sync_member", run_at=timezone.now()
    )
    other = Job.objects.create(handler="myapp.jobs.send", run_at=timezone.now())
    try:
        Job = migrate(AFTER).get_model("tasksapp", "Job")
        handlers = dict(Job.objects.values_list("id", "handler"))
        assert handlers[old.id] == "tasksapp.demo.handlers.greet"
        assert handlers[planned.id] == "tasksapp.recurring.handlers.sync_member"
        assert handlers[other.id] == "myapp.jobs.send"
        Job = migrate(BEFORE).get_model("tasksapp", "Job")
        assert Job.objects.get(id=old.id).handler == "tasksapp.demo.greet"
    finally:
        migrate_to_latest()


def index_conditions(names) -> dict[str, str | None]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = ANY(%s)",
            [list(names)],
        )
        return dict(cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's index conditions")
def test_the_run_time_indexes_lose_and_regain_the_jobs_in_flight():
    """0019 rebuilds three indexes without the jobs in flight, each under its own name,
    and back; nothing is left of the rebuild."""
    names = ("job_state_run_at_idx", "job_handler_run_at_idx", "job_run_at_id_idx")
    rebuilt = [f"{name}_rebuilt" for name in names]
    try:
        migrate([("tasksapp", "0018_worker_deferred_starts")])
        assert index_conditions([*names, *rebuilt]) == dict.fromkeys(names)
        migrate([("tasksapp", "0019_job_indexes_without_jobs_in_flight")])
        conditions = index_conditions([*names, *rebuilt])
        assert set(conditions) == set(names)
        for condition in conditions.values():
            assert condition.startswith("(NOT ") and "'claimed'" in condition
            assert "'running'" in condition
    finally:
        migrate_to_latest()


TRIGRAM_INDEXES = ("job_error_trgm_idx", "job_key_trgm_idx", "job_payload_trgm_idx")
INDEX_STATES = """
SELECT c.relname, am.amname, i.indisvalid FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
WHERE c.relname = ANY(%s)
"""


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's trigram indexes")
def test_the_text_search_indexes_come_and_go_and_an_interrupted_build_is_done_again():
    """0023 builds three partial trigram indexes (a build interrupted before, which left
    an invalid index under one of the names, is dropped and done again) and drops them
    when reversed."""
    from django.db import IntegrityError

    try:
        Job = migrate([("tasksapp", "0021_recurring_audience")]).get_model("tasksapp", "Job")
        assert index_conditions(TRIGRAM_INDEXES) == {}
        Job.objects.create(handler="a.b", run_at=timezone.now(), idempotency_key="k1")
        Job.objects.create(handler="a.b", run_at=timezone.now(), idempotency_key="k2")
        with connection.cursor() as cursor, pytest.raises(IntegrityError):
            cursor.execute(  # fails on the duplicates, leaving the index invalid
                "CREATE UNIQUE INDEX CONCURRENTLY job_key_trgm_idx ON tasksapp_job (handler)"
            )
        migrate([("tasksapp", "0023_job_text_search")])
        with connection.cursor() as cursor:
            cursor.execute(INDEX_STATES, [list(TRIGRAM_INDEXES)])
            states = {name: (method, valid) for name, method, valid in cursor.fetchall()}
        assert states == dict.fromkeys(TRIGRAM_INDEXES, ("gin", True))
        for condition in index_conditions(TRIGRAM_INDEXES).values():
            assert condition.startswith("(NOT ") and "'claimed'" in condition
            assert "'running'" in condition and "'scheduled'" not in condition
        migrate([("tasksapp", "0021_recurring_audience")])
        assert index_conditions(TRIGRAM_INDEXES) == {}
    finally:
        migrate_to_latest()


SEARCH_INDEXES = ("job_search_key_trgm_idx", "job_search_payload_trgm_idx")
MOVED_INDEXES = ("job_key_trgm_idx", "job_payload_trgm_idx")
SEARCH_TRIGGERS = "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'tasksapp_job_search_%%'"


def search_table_rows() -> dict[int, tuple[str, str]] | None:
    """The search rows by job id; None when the table is not there."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('tasksapp_job_search') IS NOT NULL")
        if not cursor.fetchone()[0]:
            return None
        cursor.execute("SELECT job_id, idempotency_key, payload FROM tasksapp_job_search")
        return {job_id: (key, payload) for job_id, key, payload in cursor.fetchall()}


def search_triggers() -> int:
    with connection.cursor() as cursor:
        cursor.execute(SEARCH_TRIGGERS)
        return cursor.fetchone()[0]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's search rows")
def test_the_keys_and_payloads_move_to_search_rows_and_back():
    """0028 gives the jobs already there their search rows, builds the two trigram
    indexes on them and drops the jobs table's; reversed, the jobs table's come back and
    the rows, their triggers and indexes go."""
    try:
        Job = migrate([("tasksapp", "0027_job_error_trgm_without_empty_errors")]).get_model(
            "tasksapp", "Job"
        )
        assert search_table_rows() is None and search_triggers() == 0
        old = Job.objects.create(handler="a.b", run_at=timezone.now(), idempotency_key="old-1")
        migrate([("tasksapp", "0028_job_search_rows")])
        assert search_table_rows() == {old.id: ("old-1", "{}")}
        with connection.cursor() as cursor:
            cursor.execute(INDEX_STATES, [list(SEARCH_INDEXES + MOVED_INDEXES)])
            states = {name: (method, valid) for name, method, valid in cursor.fetchall()}
        assert states == dict.fromkeys(SEARCH_INDEXES, ("gin", True))
        assert search_triggers() == 4
        new = Job.objects.create(handler="a.b", run_at=timezone.now(), payload={"x": "y"})
        assert search_table_rows()[new.id] == (new.idempotency_key, '{"x": "y"}')
        migrate([("tasksapp", "0027_job_error_trgm_without_empty_errors")])
        assert search_table_rows() is None and search_triggers() == 0
        assert set(index_conditions(MOVED_INDEXES)) == set(MOVED_INDEXES)
    finally:
        migrate_to_latest()
