"""The Redis due index against real Redis (the shared server, under a key prefix of the
test's own), and the Redis dispatch mode of the loop driven step by step."""

import datetime as dt
import threading
import time
import uuid

import pytest
import redis
from django.utils import timezone

from tasksapp.contrib.redis_index import source as redis_source
from tasksapp.contrib.redis_index.index import GENERATION, RedisIndex
from tasksapp.engine.dispatcher.loop import DispatcherLoop
from tasksapp.engine.models import Dispatcher, Job
from tasksapp.engine.services import job_cancel, job_schedule
from tests.conftest import RecordingPublisher

HANDLER = "tests.handlers.recording.noop"


@pytest.fixture
def prefix(broker_url):
    name = f"tempo-test-{uuid.uuid4().hex[:8]}:"
    yield name
    client = redis.Redis.from_url(broker_url)
    for key in client.scan_iter(f"{name}*"):
        client.delete(key)
    client.close()


@pytest.fixture
def index(broker_url, prefix) -> RedisIndex:
    return RedisIndex(url=broker_url, prefix=prefix)


def build(index: RedisIndex, shards, horizon_ms=10**15) -> str:
    gen = index.generation()
    for shard in shards:
        assert index.mark_built(shard, generation=gen, horizon_ms=horizon_ms)
    return gen


def test_take_returns_due_members_in_run_time_order_and_leaves_the_rest(index):
    build(index, [0, 1])
    index.add_many([(0, 10, 3000), (1, 11, 1000), (0, 12, 2000), (1, 13, 9000)])
    taken = index.take(shards=[0, 1], until_ms=5000, lease_ms=1000, limit=10)
    assert taken.ids == {0: [12, 10], 1: [11]}
    assert taken.next_ms == 9000
    inflight = index.client.zrange(index.key("inflight", 0), 0, -1, withscores=True)
    assert inflight == [(b"10", 6000.0), (b"12", 6000.0)]
    assert index.take(shards=[0, 1], until_ms=5000, lease_ms=1000, limit=10).ids == {}


def test_take_respects_the_limit(index):
    build(index, [0])
    index.add_many([(0, i, 1000 + i) for i in range(1, 6)])
    taken = index.take(shards=[0], until_ms=5000, lease_ms=1000, limit=2)
    assert taken.ids == {0: [1, 2]} and taken.next_ms == 1003


def test_a_take_larger_than_luas_unpack_limit(index):
    build(index, [0])
    index.add_many([(0, i, 1000) for i in range(1, 12_001)])
    taken = index.take(shards=[0], until_ms=5000, lease_ms=1000, limit=12_000)
    assert len(taken.ids[0]) == 12_000 and taken.next_ms is None
    assert index.client.zcard(index.key("inflight", 0)) == 12_000


def test_an_unbuilt_or_lost_shard_is_reported_not_served(index):
    build(index, [0])
    index.add_many([(0, 1, 1000), (1, 2, 1000)])
    taken = index.take(shards=[0, 1], until_ms=5000, lease_ms=1000, limit=10)
    assert taken.unbuilt == [1] and taken.ids == {0: [1]}
    index.client.delete(index.key(GENERATION))  # as after FLUSHALL or a restart
    assert index.take(shards=[0], until_ms=5000, lease_ms=1000, limit=10).unbuilt == [0]


def test_add_honours_the_horizon_and_the_marker(index):
    build(index, [0], horizon_ms=5000)
    assert index.add(shard=0, job_id=1, run_at_ms=4000) == 1
    assert index.add(shard=0, job_id=2, run_at_ms=6000) == 2
    assert index.add(shard=1, job_id=3, run_at_ms=4000) == 0
    assert index.client.zrange(index.key("due", 0), 0, -1) == [b"1"]


def test_a_marker_of_an_old_generation_does_not_count(index):
    old = build(index, [0])
    index.client.delete(index.key(GENERATION))
    assert index.generation() != old
    assert not index.mark_built(0, generation=old, horizon_ms=10**15)
    assert index.horizons([0]) == {0: None}


def test_concurrent_takers_never_take_a_member_twice(broker_url, prefix):
    shards = list(range(16))
    build(RedisIndex(url=broker_url, prefix=prefix), shards)
    RedisIndex(url=broker_url, prefix=prefix).add_many(
        [(i % 16, i, 1000 + i % 97) for i in range(1, 20_001)]
    )
    taken: list[list[int]] = []

    def taker() -> None:
        mine = RedisIndex(url=broker_url, prefix=prefix)
        got: list[int] = []
        while True:
            batch = mine.take(shards=shards, until_ms=10**6, lease_ms=1000, limit=100)
            if not batch.ids:
                break
            got += batch.all_ids()
        taken.append(got)

    threads = [threading.Thread(target=taker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [job_id for got in taken for job_id in got]
    assert len(everything) == 20_000 and len(set(everything)) == 20_000
    assert sum(1 for got in taken if got) > 1  # they really competed


def test_expired_takes_are_returned_by_one_instance_at_a_time(index):
    build(index, [0, 1])
    index.add_many([(0, 1, 1000), (1, 2, 1000), (1, 3, 4000)])
    index.take(shards=[0, 1], until_ms=2000, lease_ms=1000, limit=10)  # deadline 3000
    assert index.return_expired(partitions=2, owner="a", now_ms=2500, lock_ms=50) == 0
    time.sleep(0.06)
    assert index.return_expired(partitions=2, owner="a", now_ms=3500, lock_ms=5000) == 2
    assert index.return_expired(partitions=2, owner="b", now_ms=3500, lock_ms=5000) == -1
    assert index.client.zcard(index.key("inflight", 0)) == 0
    taken = index.take(shards=[0, 1], until_ms=3500, lease_ms=1000, limit=10)
    assert sorted(taken.all_ids()) == [1, 2]


def test_ack_forgets_the_takes(index):
    build(index, [0])
    index.add_many([(0, 1, 1000)])
    taken = index.take(shards=[0], until_ms=2000, lease_ms=1000, limit=10)
    index.ack(taken)
    assert index.client.zcard(index.key("inflight", 0)) == 0


# --- the loop in Redis mode ------------------------------------------------------------


@pytest.fixture
def redis_mode(settings, prefix, monkeypatch):
    monkeypatch.setattr(redis_source, "CHECK_SECONDS", 0.1)
    settings.TEMPO = {
        **settings.TEMPO,
        "DISPATCH_MODE": "redis",
        "INDEX_PREFIX": prefix,
        "INDEX_REDIS_URL": settings.CELERY_BROKER_URL,
    }
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 0.1}


@pytest.fixture
def loop(redis_mode):
    running = DispatcherLoop(name="r1", publisher=RecordingPublisher())
    running.start()
    yield running
    running.stop()


def run_until(predicate, loop, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        loop.step(wait=True)
        if predicate():
            return
    raise AssertionError("condition not reached in time")


def schedule(seconds_from_now: float) -> Job:
    run_at = timezone.now() + dt.timedelta(seconds=seconds_from_now)
    return job_schedule(handler=HANDLER, run_at=run_at)


@pytest.mark.django_db(transaction=True)
def test_redis_mode_builds_the_index_then_claims_from_it(loop):
    early = schedule(0.3)
    run_until(lambda: len(loop.source.indexed) == 16, loop)
    assert Dispatcher.objects.get(name="r1").dispatch_mode == "redis"
    late = schedule(0.5)  # announced by NOTIFY, indexed by the owner
    cancelled = schedule(0.4)
    job_cancel(job_id=cancelled.id)
    run_until(lambda: len(loop.publisher.claims) >= 2, loop)
    time.sleep(0.3)
    loop.step(wait=True)
    assert sorted(c[0] for c in loop.publisher.claims) == sorted([early.id, late.id])
    index = loop.source.index
    assert all(index.client.zcard(index.key("due", p)) == 0 for p in range(16))
    assert all(index.client.zcard(index.key("inflight", p)) == 0 for p in range(16))


@pytest.mark.django_db(transaction=True)
def test_a_lost_index_falls_back_to_polling_and_is_rebuilt(loop):
    run_until(lambda: len(loop.source.indexed) == 16, loop)
    index = loop.source.index
    for key in index.client.scan_iter(f"{index.prefix}*"):
        index.client.delete(key)  # this prefix's FLUSHALL
    job = schedule(0.5)
    run_until(lambda: loop.publisher.claims, loop)
    assert [c[0] for c in loop.publisher.claims] == [job.id]
    run_until(lambda: len(loop.source.indexed) == 16, loop)
    assert index.client.get(index.key(GENERATION)) is not None


@pytest.mark.django_db(transaction=True)
def test_a_stale_member_is_dropped_by_the_fenced_claim(loop):
    run_until(lambda: len(loop.source.indexed) == 16, loop)
    job = schedule(-1)
    run_until(lambda: loop.publisher.claims, loop)
    index = loop.source.index
    index.add_many([(job.id % 16, job.id, 1000)])  # the row is claimed, not scheduled
    loop.source.next_take = 0.0
    loop.step(wait=False)
    assert len(loop.publisher.claims) == 1
    assert index.client.zcard(index.key("due", job.id % 16)) == 0


@pytest.mark.django_db(transaction=True)
def test_a_new_owner_serves_handed_over_shards_from_the_index(redis_mode):
    first = DispatcherLoop(name="r1", publisher=RecordingPublisher())
    first.start()
    second = DispatcherLoop(name="r2", publisher=RecordingPublisher())
    try:
        run_until(lambda: len(first.source.indexed) == 16, first)
        jobs = [schedule(1.5) for _ in range(8)]
        second.start()
        deadline = time.monotonic() + 5
        while (
            time.monotonic() < deadline
            and not len(first.source.indexed) == len(second.source.indexed) == 8
        ):
            first.step(wait=True)  # notifications are read while waiting
            second.step(wait=True)
        assert len(first.source.indexed) == len(second.source.indexed) == 8
        deadline = time.monotonic() + 5
        claims = []
        while time.monotonic() < deadline and len(claims) < len(jobs):
            first.step(wait=True)  # notifications are read while waiting
            second.step(wait=True)
            claims = first.publisher.claims + second.publisher.claims
        assert sorted(c[0] for c in claims) == sorted(job.id for job in jobs)
    finally:
        first.stop()
        second.stop()
