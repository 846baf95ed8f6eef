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
