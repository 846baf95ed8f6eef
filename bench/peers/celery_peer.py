"""Celery with ETA tasks on Redis, as a user sets it up: `apply_async(eta=...)`,
acks_late. PEERS_BROKER_URL names the broker; PEERS_VISIBILITY_TIMEOUT, when set,
lowers the Redis transport's visibility timeout (default one hour).

    celery -A bench.peers.celery_peer worker -c 5
"""

import os

from celery import Celery

from bench.peers import work

app = Celery("peers", broker=os.environ.get("PEERS_BROKER_URL", "redis://127.0.0.1:6379/3"))
app.conf.task_acks_late = True
app.conf.task_default_queue = "peers"
if os.environ.get("PEERS_VISIBILITY_TIMEOUT"):
    app.conf.broker_transport_options = {
        "visibility_timeout": float(os.environ["PEERS_VISIBILITY_TIMEOUT"])
    }


@app.task(name="peers.execute")
def execute(job_id: int) -> None:
    work.execute(job_id)
