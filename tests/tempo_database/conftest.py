"""Tempo's tables on a database of their own. These tests run only when the settings
make one: `TEMPO_DATABASE_URL=postgres://…/<name>_tempo` beside DATABASE_URL (schedapp's
settings then add the alias "tempo", TEMPO_DATABASE and the router; docs/DEPLOYMENT.md)."""

from __future__ import annotations

import pytest
from django.conf import settings

import tests.tempo_database.handlers  # noqa: F401  (registers the handlers here)
from tests.web.conftest import _own_cache  # noqa: F401  (each test a cache of its own)

SEPARATE = getattr(settings, "TEMPO_DATABASE", "default") == "tempo"


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="set TEMPO_DATABASE_URL to run Tempo on a second database")
    for item in items:
        if "tests/tempo_database/" in str(item.path) and not SEPARATE:
            item.add_marker(skip)
