"""The handlers bench/routing schedules. Each records its own begin and end (time.time():
dispatchers, workers and the bench share one host) in a Redis list named by its payload,
so the limits are checked from the handlers' records, not from Tempo's rows."""

from __future__ import annotations

import os
import time

import redis

from tasksapp.engine.handlers import job_handler

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["BENCH_ROUTING_REDIS"])
    return _client


@job_handler
def span(ctx):
    """Sleeps payload['seconds'] (0: returns at once) and records [begin, end]."""
    began = time.time()
    time.sleep(float(ctx.payload.get("seconds", 0)))
    ended = time.time()
    _redis().rpush(ctx.payload["record"], f"{ctx.job_id} {began} {ended}")
