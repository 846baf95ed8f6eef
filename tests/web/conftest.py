"""Every web test counts API throttles in a cache of its own, never in the shared Redis
(CACHES defaults to the broker's database): no test sees another's counts."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture(autouse=True)
def _own_cache(settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"test-{uuid.uuid4().hex}",
        }
    }
