"""Dramatiq on Redis with delayed messages (`send_with_options(delay=ms)`), as a user
sets it up. PEERS_BROKER_URL names the broker; PEERS_HEARTBEAT_TIMEOUT_MS, when set,
lowers the time after which a silent worker's messages go back to the queue (default
60 s).

    dramatiq bench.peers.dramatiq_peer --processes 1 --threads 5
"""

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.peers import work

options = {}
if os.environ.get("PEERS_HEARTBEAT_TIMEOUT_MS"):
    options["heartbeat_timeout"] = int(os.environ["PEERS_HEARTBEAT_TIMEOUT_MS"])
broker = RedisBroker(url=os.environ.get("PEERS_BROKER_URL", "redis://127.0.0.1:6379/3"), **options)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="peers")
def execute(job_id: int) -> None:
    work.execute(job_id)
