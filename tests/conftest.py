"""Shared fixtures: real PostgreSQL (pytest-django's test database) and real Redis."""

from __future__ import annotations

import os
import uuid
from unittest import mock

import pytest
from hypothesis import settings as hypothesis_settings

import tests.handlers.recording  # noqa: F401  (registers the test handlers here)
from tests.processes.support import PrivateRedis, purge_queue

# Properties are checked against real databases on a shared machine: a slow example is
# not a failure (hypothesis' default 200 ms deadline made them flaky).
hypothesis_settings.register_profile("tempo", deadline=None)
hypothesis_settings.load_profile("tempo")

# The dispatchers and workers the process tests start inherit this environment: they
# register the same handlers as this process.
os.environ.setdefault(
    "TEMPO_HANDLER_MODULES",
    "tasksapp.demo.handlers,tasksapp.recurring.handlers,tests.handlers.recording",
)


# What migrations made and no test changes: kept, so the post_migrate signal after each
# flush (its only receivers make content types and permissions) has nothing to make.
KEPT_TABLES = {"django_content_type", "auth_permission"}
# The rows the migrations make (beat entries, the routing mode, the roles, ...), as
# migrated: put back after each flush, so that a test reading them passes on a pytest worker
# that ran a transactional test before it (xdist runs the process tests' group out of
# pytest-django's order, which puts transactional tests last). KEPT_TABLES stay anyway.
MIGRATED_ROWS: dict[str, str] = {}  # database alias: its rows, serialized


def _migrated_rows(alias: str) -> list:
    from django.apps import apps
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType
    from django.core.serializers import sort_dependencies
    from django.db import connections, router

    app_list = [(app, None) for app in apps.get_app_configs() if app.models_module is not None]
    models = [
        model
        for model in sort_dependencies(app_list)
        if model not in (ContentType, Permission)
        and not model._meta.proxy
        and model._meta.can_migrate(connections[alias])
        and router.allow_migrate_model(alias, model)
    ]
    return [row for model in models for row in model._default_manager.using(alias).order_by("pk")]


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing():
    """Django's PBKDF2 takes half a second a password here, and hundreds of tests make a
    user with one: the tests hash with MD5 (Django's advice for test runs), which checks
    passwords the same way. The processes the tests start keep the real hasher."""
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test databases, migrated; what the migrations made kept as MIGRATED_ROWS."""
    from django.core import serializers
    from django.db import connections

    with django_db_blocker.unblock():
        for alias in connections:
            MIGRATED_ROWS[alias] = serializers.serialize("json", _migrated_rows(alias))


def _migrated_rows_back(verbosity=0, interactive=False, database="default", **kwargs) -> None:
    """In place of post_migrate after a flush: what the migrations made, back."""
    from django.core import serializers

    if database in MIGRATED_ROWS:
        for row in serializers.deserialize("json", MIGRATED_ROWS[database], using=database):
            row.save(using=database)


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete():
    """After each transactional test Django empties every table with one TRUNCATE, which
    makes new files for each of ~35 tables and their indexes, then sends post_migrate
    (some 45 commits): 2-2.5 s a test on a loaded machine. DELETE of the few rows a test
    leaves takes a tenth of that (every foreign key is deferrable, so the order of the
    tables does not matter), and with KEPT_TABLES kept post_migrate is not needed."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or not tables:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        deletes = [
            f"DELETE FROM {self.quote_name(table)}" for table in tables if table not in KEPT_TABLES
        ]
        return ["SET CONSTRAINTS ALL DEFERRED", *deletes]

    with (
        mock.patch.object(DatabaseOperations, "sql_flush", sql_flush),
        mock.patch(
            "django.core.management.commands.flush.emit_post_migrate_signal",
            _migrated_rows_back,
        ),
    ):
        yield


@pytest.fixture
def broker_url() -> str:
    return os.environ["CELERY_BROKER_URL"]


@pytest.fixture
def queue_name(broker_url, settings):
    """A queue of this test's own on the shared Redis, deleted afterwards."""
    name = f"tempo-test-{uuid.uuid4().hex[:8]}"
    settings.TEMPO = {**settings.TEMPO, "QUEUE": name}
    yield name
    purge_queue(broker_url, name)


# pg_locks spans the whole server, where the other pytest worker's database holds
# advisory locks of the same classes and keys: a test counts its own database's only.
THIS_DATABASE = "database = (SELECT oid FROM pg_database WHERE datname = current_database())"


def session_params() -> dict:
    """The test database's connection parameters, for a psycopg session of its own (a
    peer, a lingering holder of locks) beside Django's."""
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return params


class RecordingPublisher:
    """Stands in for the broker in dispatcher unit tests: keeps what would be sent."""

    def __init__(self) -> None:
        self.batches: list[list[list[int]]] = []
        self.queues: list[str | None] = []  # each batch's Celery queue (None: the default)

    def __call__(self, batches, queue=None):
        self.batches.extend(batches)
        self.queues.extend([queue] * len(batches))

    @property
    def claims(self) -> list[list[int]]:
        return [claim for batch in self.batches for claim in batch]


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture(autouse=True)
def _stop_lease_keeper():
    """The executor starts a lease-keeper thread per process; stop it after each test so
    no connection outlives the test database."""
    yield
    from tasksapp.engine.worker.executor import stop_handler_pool
    from tasksapp.engine.worker.lease_keeper import stop_lease_keeper

    stop_lease_keeper()
    stop_handler_pool()


class Effects:
    """Rows written by tests.handlers.recording handlers: one per committed execution."""

    def count(self, job_id: int | None = None) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            if job_id is None:
                cursor.execute("SELECT count(*) FROM test_effects")
            else:
                cursor.execute("SELECT count(*) FROM test_effects WHERE job_id = %s", [job_id])
            return cursor.fetchone()[0]

    def per_job(self) -> dict[int, int]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT job_id, count(*) FROM test_effects GROUP BY job_id")
            return dict(cursor.fetchall())


@pytest.fixture
def effects(db) -> Effects:
    from django.db import connection

    from tests.handlers.recording import _ensure_table

    _ensure_table()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE test_effects")
    return Effects()


# Run with xdist (`-n 3 --dist loadgroup`, as bin/test does), the tests that start real
# processes go to one worker, one after another: each measures bounds in seconds and
# must not share two cores with another such test. Those whose bounds are about what ran
# (each job once, nothing lost), not how soon, and whose processes are no cluster's
# (the embedded run, a host project, the graph and retention runs; a frozen peer, a
# silent network, a rolling re-partition, a restarted database: BESIDE, each waited for
# in seconds to tens of seconds) run on any worker instead, beside them: about 40 % of
# the process tests' time, taken off the suite's longest path. The multi-host tests,
# process tests too, are a group of their own beside them: they run on servers of their
# own, with bounds of tens of seconds. The browser tests are one group too (their
# module's browser is started once). Every other test runs on any worker.
GROUPS_BY_PATH = {
    "tests/processes/": "processes",
    "tests/cluster/": "rig",
    "tests/e2e/": "browser",
}
BESIDE = (
    "tests/host/",
    "tests/test_run_overload.py",
    "tests/test_run_smoke.py",
    "tests/graphs/",
    "tests/processes/test_retention.py",
    "tests/processes/test_pgbouncer.py",
    "tests/processes/test_beat.py",
    "tests/processes/test_stalls.py",
    "tests/processes/test_silent_network.py",
    "tests/processes/test_repartition.py",
    "tests/processes/test_outages.py::test_postgres_restarted_mid_run_loses_and_doubles_nothing",
)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups to schedule
def pytest_collection_modifyitems(config, items):
    root = f"{config.rootpath}/"
    for item in items:
        path = str(item.path).removeprefix(root)
        group = next((g for prefix, g in GROUPS_BY_PATH.items() if path.startswith(prefix)), None)
        if item.get_closest_marker("processes") and group in (None, "processes"):
            group = None if item.nodeid.startswith(BESIDE) else "processes"
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    """Each test's workers read the queues' rate limits anew (they keep them 2 s)."""
    from tasksapp.engine.worker.start_rate import start_rates

    start_rates.forget()


@pytest.fixture
def private_redis():
    """A Redis server of the test's own, on its own port: it may be stopped, restarted
    and flushed."""
    server = PrivateRedis().start()
    yield server
    server.stop()
