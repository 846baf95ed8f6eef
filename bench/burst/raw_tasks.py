"""A no-op Celery task for the raw-Celery side of the burst bench: one message per task;
each run counts itself and stamps the time in Redis."""

import time

import redis
from celery import shared_task
from django.conf import settings

_client = None


def _redis():
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    return _client


@shared_task(name="bench.raw_noop", ignore_result=True)
def raw_noop(key: str) -> None:
    client = _redis()
    pipe = client.pipeline(transaction=False)
    pipe.incr(f"{key}:done")
    pipe.set(f"{key}:last", time.time())
    pipe.execute()
