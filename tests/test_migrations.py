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
