"""Raw Celery for the steady peers: one no-op task that records its start (bench.steady.
lags), Celery's defaults otherwise (early acks, prefetch multiplier 4). STEADY_BROKER_URL
names the broker.

    celery -A bench.steady.celery_app worker -Q steady -P prefork -c 1
"""

import os

from celery import Celery

from bench.steady import lags

app = Celery("steady", broker=os.environ.get("STEADY_BROKER_URL", "redis://127.0.0.1:6379/9"))
app.conf.task_default_queue = "steady"


@app.task(name="steady.noop")
def noop(key: int, due: float) -> None:
    lags.record(key, due)
