"""How long `GET /api/graph-jobs/<id>/wait/` may hold a web worker: a short poll.

A web worker that waits answers nobody else (gunicorn's sync workers: three in the
image), so a wait is held WAIT_MOST_SECONDS at most, whatever `timeout` asks, and
answers with the graph as it is then (`done` false: ask again). A user has at most
WAITS_PER_USER waits held at once, counted in the cache that all web processes share;
a wait beyond that answers at once. A count left by a killed worker expires with
WAIT_SLOT_TTL_SECONDS."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from django.core.cache import cache

WAIT_MOST_SECONDS = 2.0
WAITS_PER_USER = 1
WAIT_SLOT_KEY = "tempo:graph-waits:{user}"
WAIT_SLOT_TTL_SECONDS = 60


def wait_seconds(*, asked: float, held: bool) -> float:
    """How long the server waits for an answer asked to wait `asked` seconds; 0 when
    the user's waits are all taken (`held` false)."""
    return min(asked, WAIT_MOST_SECONDS) if held else 0.0


@contextmanager
def graph_wait_slot(*, user: Any) -> Iterator[bool]:
    """One of the user's WAITS_PER_USER wait slots for the `with` block: True when it
    was free, False when the user's waits were all taken (then answer at once)."""
    key = WAIT_SLOT_KEY.format(user=getattr(user, "pk", None) or "anonymous")
    cache.add(key, 0, timeout=WAIT_SLOT_TTL_SECONDS)
    try:
        held = cache.incr(key)
    except ValueError:  # expired between the two calls
        cache.add(key, 1, timeout=WAIT_SLOT_TTL_SECONDS)
        held = 1
    try:
        yield held <= WAITS_PER_USER
    finally:
        with suppress(ValueError):  # expired meanwhile: nothing left to give back
            cache.decr(key)
