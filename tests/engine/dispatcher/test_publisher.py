"""The publisher against a real Redis that goes away: what the transport raises then is a
broker error the dispatcher handles (it steps out of the ring), not a crash and not a
"hiccup" that reads as reachable."""

import pytest
from celery import Celery

from tasksapp.engine.dispatcher.broker import CeleryPublisher


@pytest.fixture
def publisher(private_redis):
    app = Celery(set_as_current=False)
    # The read and write URLs: CELERY_BROKER_URL in the environment overrides broker_url.
    app.conf.broker_read_url = app.conf.broker_write_url = private_redis.url
    yield CeleryPublisher(queue="tempo-publisher-test", app=app)
    app.pool.force_close_all()


def test_a_broker_that_stops_under_a_pooled_connection_is_unreachable(publisher, private_redis):
    publisher.warm_up()  # a connection is open and pooled
    publisher([[[1, 1, 0.0]]])
    assert publisher.backlog() == 1
    private_redis.stop()
    with pytest.raises(publisher.errors):
        publisher.backlog()
    with pytest.raises(publisher.errors):
        publisher([[[2, 1, 0.0]]])
    private_redis.start()  # the same port, empty (no persistence): reachable again
    assert publisher.backlog() == 0


def test_a_broker_that_refuses_connections_is_unreachable(publisher, private_redis):
    private_redis.stop()
    with pytest.raises(publisher.errors):
        publisher.backlog()
    with pytest.raises(publisher.errors):
        publisher([[[1, 1, 0.0]]])


def test_a_broker_that_refuses_the_message_is_a_broker_error(publisher, private_redis):
    """Reached, but the write refused (Redis at maxmemory): the claim's message is not
    sent, which the dispatcher handles as it does an unreachable broker."""
    import redis

    publisher.warm_up()
    redis.Redis.from_url(private_redis.url).config_set("maxmemory", 1)
    with pytest.raises(publisher.errors, match="refused the message"):
        publisher([[[1, 1, 0.0]]])
