"""Shared fixtures: real PostgreSQL (pytest-django's test database) and real Redis."""

from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import settings as hypothesis_settings

import tests.handlers.recording  # noqa: F401  (registers the test handlers here)
from tests.processes.support import purge_queue

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
    from tasksapp.engine.worker.executor import stop_handler_pool, stop_lease_keeper

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
