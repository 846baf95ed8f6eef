"""Shared fixtures: real PostgreSQL (pytest-django's test database) and real Redis."""

from __future__ import annotations

import os
import uuid

import pytest
import redis


@pytest.fixture
def broker_url() -> str:
    return os.environ["CELERY_BROKER_URL"]


@pytest.fixture
def queue_name(broker_url, settings):
    """A queue of this test's own on the shared Redis, deleted afterwards."""
    name = f"tempo-test-{uuid.uuid4().hex[:8]}"
    settings.TEMPO = {**settings.TEMPO, "QUEUE": name}
    yield name
    client = redis.Redis.from_url(broker_url)
    for key in client.scan_iter(f"*{name}*"):
        client.delete(key)
    client.close()


class RecordingPublisher:
    """Stands in for the broker in dispatcher unit tests: keeps what would be sent."""

    def __init__(self) -> None:
        self.batches: list[list[list[int]]] = []

    def __call__(self, batches):
        self.batches.extend(batches)

    @property
    def claims(self) -> list[list[int]]:
        return [claim for batch in self.batches for claim in batch]


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()
