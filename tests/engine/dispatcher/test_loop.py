"""The dispatcher loop, driven step by step in-process against real PostgreSQL."""

import dataclasses
import datetime as dt
import threading
import time

import psycopg
import pytest
from django.db import connection
from django.db.models import Sum
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from tasksapp.engine.clock import ClockOffset
from tasksapp.engine.cluster import sql
from tasksapp.engine.cluster.partitions import PostgresCoordinator
from tasksapp.engine.dispatcher import loop as loop_module
from tasksapp.engine.dispatcher.clock import LEAD_ROUND_TRIPS
from tasksapp.engine.dispatcher.loop import DispatcherLoop
from tasksapp.engine.dispatcher.messages import split_batches
from tasksapp.engine.dispatcher.sources import database as database_source
from tasksapp.engine.dispatcher.sources.database import CLAIM_ROUND_MS
from tasksapp.engine.models import Dispatcher, DispatcherCounter, Job, JobState, WorkerProcess
from tasksapp.engine.services import job_schedule
from tasksapp.engine.transitions import Claim, job_claim_due
from tests.conftest import THIS_DATABASE, RecordingPublisher, session_params

pytestmark = pytest.mark.django_db(transaction=True)
HANDLER = "tests.handlers.recording.noop"


@pytest.fixture
def fast(settings):
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 0.1}


@pytest.fixture
def loops():
    started = []

    def make(name, publisher):
        loop = DispatcherLoop(name=name, publisher=publisher)
        loop.start()
        started.append(loop)
        return loop

    yield make
    for loop in started:
        loop.stop()


def run_until(predicate, *loops, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for loop in loops:
            loop.step(wait=True)
        if predicate():
            return
    raise AssertionError("condition not reached in time")


def waits_on(loop) -> bool:
    """Whether some session waits for `loop`'s instance lock (a peer watcher)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            f" AND classid = %s AND objid = %s AND {THIS_DATABASE}",
            [sql.DISPATCHER_LOCK_CLASS, loop.record.id],
        )
        return cursor.fetchone()[0] > 0


def schedule(seconds_from_now: float) -> Job:
    return job_schedule(
        handler=HANDLER, run_at=timezone.now() + dt.timedelta(seconds=seconds_from_now)
    )


def test_claims_a_due_job_and_publishes_id_token_and_run_at(loops, publisher, fast):
    job = schedule(-0.01)
    loop = loops("d1", publisher)
    run_until(lambda: publisher.claims, loop)
    [[job_id, token, run_at_ms]] = publisher.claims
    assert (job_id, token) == (job.id, 1)
    assert run_at_ms == pytest.approx(job.run_at.timestamp() * 1000, abs=0.001)  # to the µs
    assert Job.objects.get(id=job.id).state == JobState.CLAIMED


def test_holds_a_future_job_until_its_run_time(loops, publisher, fast):
    job = schedule(1.5)  # the first turn (coordination, rules, poll) ends well before
    loop = loops("d1", publisher)
    loop.step(wait=False)
    # As the job was held: its lead, at the start of that moment's claim round.
    lead = dt.timedelta(milliseconds=loop.lead_ms() + CLAIM_ROUND_MS + 2)
    assert job.id in loop.source.wheel and publisher.claims == []
    run_until(lambda: publisher.claims, loop)
    claimed_at = Job.objects.get(id=job.id).claimed_at
    # Claimed just ahead, never started.
    assert claimed_at >= job.run_at - lead
    assert claimed_at <= job.run_at + dt.timedelta(milliseconds=100)


def test_the_lead_grows_with_the_measured_round_trip_to_the_database(loops, publisher, fast):
    loop = loops("d1", publisher)
    loop.step(wait=False)  # one coordination round: one round trip measured
    measured = loop.coordinator.clock.round_trip_ms
    assert measured > 0
    settings = loop.settings
    extra = round(LEAD_ROUND_TRIPS * measured)
    assert loop.lead_ms() == settings.dispatch_lead_ms + extra
    far = ClockOffset()
    far.observe(0.0, 25.0, 12.5)  # a database 25 ms away
    loop.coordinator.clock = far
    assert loop.lead_ms() == settings.dispatch_lead_ms + round(LEAD_ROUND_TRIPS * 25)


def test_a_job_scheduled_for_now_wakes_the_dispatcher_without_a_poll(loops, publisher, fast):
    loop = loops("d1", publisher)
    run_until(lambda: loop.coordinator.owned, loop)
    loop.step(wait=False)
    polls = loop.counters["polls"]
    job = schedule(0)
    run_until(lambda: publisher.claims, loop)  # the next poll is 240 s away
    assert publisher.claims[0][0] == job.id
    assert loop.counters["polls"] == polls  # found by NOTIFY, not by polling


def test_a_cancelled_job_leaves_the_wheel(loops, publisher, fast):
    job = schedule(0.5)
    loop = loops("d1", publisher)
    loop.step(wait=False)
    assert job.id in loop.source.wheel
    Job.objects.filter(id=job.id).update(state=JobState.CANCELLED)
    run_until(lambda: job.id not in loop.source.wheel, loop)


def test_two_dispatchers_split_the_partitions_and_never_race(loops, fast):
    first, second = RecordingPublisher(), RecordingPublisher()
    a, b = loops("a", first), loops("b", second)
    run_until(lambda: len(a.coordinator.owned) == len(b.coordinator.owned) == 8, a, b)
    assert a.coordinator.owned.isdisjoint(b.coordinator.owned)
    jobs = [schedule(0.2) for _ in range(40)]
    run_until(lambda: len(first.claims) + len(second.claims) == 40, a, b)
    assert {c[0] for c in first.claims} | {c[0] for c in second.claims} == {j.id for j in jobs}
    assert all(c[0] % 16 in a.coordinator.owned for c in first.claims)
    assert a.counters["claims_lost"] == b.counters["claims_lost"] == 0


def test_a_survivor_takes_over_the_partitions_of_a_dead_dispatcher(loops, fast):
    first, second = RecordingPublisher(), RecordingPublisher()
    a, b = loops("a", first), loops("b", second)
    run_until(lambda: len(a.coordinator.owned) == len(b.coordinator.owned) == 8, a, b)
    b.coordinator._conn.close()  # its session ends as if the process died
    jobs = [schedule(0.1) for _ in range(20)]
    run_until(lambda: len(first.claims) == 20, a)
    assert len(a.coordinator.owned) == 16
    assert {c[0] for c in first.claims} == {j.id for j in jobs}


def test_a_larger_partition_count_on_one_instance_is_followed_by_all(loops, fast, settings):
    """A rolling change of TEMPO_PARTITIONS: an instance started with 32 beside one with
    16. Both work with 32 (the largest announced), share them, and every job is claimed
    once; when the 32 one leaves, the other goes back to its own 16."""
    first, second = RecordingPublisher(), RecordingPublisher()
    a = loops("a", first)
    settings.TEMPO = {**settings.TEMPO, "PARTITIONS": 32}
    b = loops("b", second)
    run_until(
        lambda: a.partitions == b.partitions == 32
        and len(a.coordinator.owned) == len(b.coordinator.owned) == 16,
        a,
        b,
    )
    assert a.coordinator.owned.isdisjoint(b.coordinator.owned)
    jobs = [schedule(0.2) for _ in range(64)]
    run_until(lambda: len(first.claims) + len(second.claims) == 64, a, b)
    claimed = [c[0] for c in first.claims + second.claims]
    assert sorted(claimed) == sorted(j.id for j in jobs)  # each once
    assert all(c[0] % 32 in a.coordinator.owned for c in first.claims)
    b.stop()
    run_until(lambda: a.partitions == 16 and len(a.coordinator.owned) == 16, a)
    late = [schedule(0.1) for _ in range(8)]
    run_until(lambda: {j.id for j in late} <= {c[0] for c in first.claims}, a)


def test_stop_hands_everything_back(loops, publisher, fast):
    job = schedule(30)
    loop = loops("d1", publisher)
    run_until(lambda: job.id in loop.source.wheel, loop)
    loop.stop()
    assert Job.objects.get(id=job.id).state == JobState.SCHEDULED
    record = Dispatcher.objects.get(name="d1")
    assert record.stopped_at is not None and record.partitions == []
    counted = DispatcherCounter.objects.filter(dispatcher="d1").aggregate(polls=Sum("polls"))
    assert counted["polls"] >= 1  # per-minute rows: the test may span two minutes


def test_split_batches_fans_out_small_batches_and_packs_large_ones():
    claims = [Claim(i, 1, 1000 + i) for i in range(20)]
    assert [len(b) for b in split_batches(claims, fanout=32, max_batch=250)] == [1] * 20
    many = [Claim(i, 1, 1000) for i in range(100_000)]
    batches = split_batches(many, fanout=32, max_batch=250)
    assert len(batches) == 400 and all(len(b) == 250 for b in batches)
    # Workers that run a batch's handlers side by side get small groups of that size.
    sizes = [len(b) for b in split_batches(claims, fanout=32, max_batch=250, parallelism=5)]
    assert sizes == [5, 5, 5, 5]
    assert [len(b) for b in split_batches(claims[:3], fanout=32, max_batch=250, parallelism=5)] == [
        3
    ]


class SlowQueue(RecordingPublisher):
    """A broker whose queue is full until `drained` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = 10_000

    def backlog(self) -> int:
        return self.waiting


def test_backpressure_holds_due_jobs_until_the_queue_drains(loops, fast):
    broker = SlowQueue()
    job = schedule(-0.01)
    loop = loops("d1", broker)
    for _ in range(5):
        loop.step(wait=True)
    assert broker.claims == [] and job.id in loop.claimer.ready
    assert Job.objects.get(id=job.id).state == JobState.SCHEDULED  # not claimed meanwhile
    broker.waiting = 0
    run_until(lambda: broker.claims, loop)
    assert broker.claims[0][0] == job.id


class DownBroker(RecordingPublisher):
    """A broker that cannot be reached (as kombu reports it) until `down` is cleared;
    `publish_fails` breaks only the publish, after the queue was read."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True
        self.publish_fails = False

    def backlog(self) -> int:
        if self.down:
            raise KombuOperationalError("Error 111 connecting. Connection refused.")
        return 0

    def __call__(self, batches):
        if self.down or self.publish_fails:
            raise KombuOperationalError("Error 111 connecting. Connection refused.")
        super().__call__(batches)


def test_a_broker_that_cannot_be_reached_stops_claims_not_the_dispatcher(loops, fast):
    broker = DownBroker()
    job = schedule(-0.01)
    loop = loops("d1", broker)
    for _ in range(5):
        loop.step(wait=True)
    assert Job.objects.get(id=job.id).state == JobState.SCHEDULED  # nothing claimed meanwhile
    broker.down = False
    run_until(lambda: broker.claims, loop)
    assert broker.claims[0][0] == job.id


def test_a_dispatcher_that_cannot_reach_the_broker_hands_its_partitions_to_a_peer(loops, fast):
    """Cut off from the broker (not from the database), an instance steps out of the ring:
    its peer takes every partition and claims its jobs; it rejoins once the broker answers."""
    healthy, cut_off = RecordingPublisher(), DownBroker()
    cut_off.down = False
    a, b = loops("a", healthy), loops("b", cut_off)
    run_until(lambda: len(a.coordinator.owned) == len(b.coordinator.owned) == 8, a, b)
    cut_off.down = True
    jobs = [schedule(0.1) for _ in range(20)]
    run_until(lambda: len(healthy.claims) == 20, a, b)
    assert b.stepped_out and not b.coordinator.connected and len(a.coordinator.owned) == 16
    assert {c[0] for c in healthy.claims} == {j.id for j in jobs} and cut_off.claims == []
    cut_off.down = False
    run_until(lambda: len(a.coordinator.owned) == len(b.coordinator.owned) == 8, a, b)
    assert not b.stepped_out


def test_a_publish_that_fails_leaves_the_claim_to_the_reaper(loops, fast, settings):
    settings.TEMPO = {**settings.TEMPO, "CLAIM_TTL_SECONDS": 0.5}
    settings.TEMPO_TUNING = {"DEFERRED_START_SECONDS": 0.2}
    broker = DownBroker()
    broker.down, broker.publish_fails = False, True
    job = schedule(-0.01)
    loop = loops("d1", broker)
    run_until(lambda: Job.objects.get(id=job.id).state == JobState.CLAIMED, loop)
    broker.publish_fails = False
    run_until(lambda: broker.claims, loop, timeout=10)  # returned by the reaper, claimed again
    assert broker.claims[0][0] == job.id
    assert Job.objects.get(id=job.id).lease_token >= 2


def test_a_burst_larger_than_one_poll_page_is_fetched_in_pages(loops, publisher, fast, monkeypatch):
    monkeypatch.setattr(database_source, "POLL_LIMIT", 50)
    run_at = timezone.now() + dt.timedelta(seconds=20, microseconds=654_321)
    ids = [job_schedule(handler=HANDLER, run_at=run_at).id for _ in range(120)]
    loop = loops("d1", publisher)
    run_until(lambda: len(loop.source.wheel) == 120, loop)
    for _ in range(10):
        loop.step(wait=False)
    polls = sum(DispatcherCounter.objects.filter(dispatcher="d1").values_list("polls", flat=True))
    assert polls <= 4  # three pages and a final short one, not a loop over the first page
    assert set(loop.source.wheel.keys()) == set(ids)


def test_a_dead_peer_is_noticed_at_once_not_at_the_next_round(loops, settings):
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 60}
    first, second = RecordingPublisher(), RecordingPublisher()
    a = loops("a", first)
    run_until(lambda: len(a.coordinator.owned) == 16, a)
    b = loops("b", second)
    # The newcomer announces itself: a hands over half now, not in 60 s.
    run_until(lambda: len(a.coordinator.owned) == len(b.coordinator.owned) == 8, a, b, timeout=5)
    # Settle: no rebalance pending, the next periodic round a minute away, and a's watcher
    # queued on b's instance lock.
    run_until(
        lambda: a.next_coordination > a.now_ms() + 10_000
        and len(a.coordinator.owned) == 8
        and waits_on(b),
        a,
        b,
    )
    b.coordinator._conn.close()  # its session ends as if the process died
    began = time.monotonic()
    run_until(lambda: len(a.coordinator.owned) == 16, a, timeout=10)
    assert time.monotonic() - began < 10  # the peer watcher woke it, not the 60 s round


def test_taking_over_goes_on_past_partitions_a_peer_just_won():
    """Survivors read the same free list at the same moment; one that loses a partition
    to a peer takes the next free one in the same round (not 2 s later)."""
    coordinator = PostgresCoordinator(partitions=16, instance_id=424242)
    coordinator.connect()
    try:
        with psycopg.connect(**session_params(), autocommit=True) as peer:
            for partition in (0, 1):
                peer.execute(
                    "SELECT pg_advisory_lock(%s, %s)", [sql.PARTITION_LOCK_CLASS, partition]
                )
            assert coordinator.take([0, 1, 2, 3], 2) == [2, 3]
            assert coordinator.owned == {2, 3}
    finally:
        coordinator.close()


def step_each_checking(loops_, check, until, timeout=10.0):
    """Step the loops one at a time, calling `check` after every single step, until
    `until()` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for loop in loops_:
            loop.step(wait=False)
            check()
        if until():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached in time")


def every_partition_served(*loops_):
    served = set().union(*(loop._served_set() for loop in loops_))
    assert served == set(range(16)), f"unserved: {sorted(set(range(16)) - served)}"


def test_a_partition_changing_hands_is_served_all_along(loops, fast):
    a = loops("a", RecordingPublisher())
    run_until(lambda: len(a.coordinator.owned) == 16, a)
    b = loops("b", RecordingPublisher())
    # Every single step, between a's release and b's take included: no partition whose
    # due jobs nobody claims.
    step_each_checking(
        [a, b],
        lambda: every_partition_served(a, b),
        until=lambda: len(a.coordinator.owned) == len(b.coordinator.owned) == 8
        and not a.coordinator.handing_over,
    )
    assert a.coordinator.owned.isdisjoint(b.coordinator.owned)
    assert a._served_set() == a.coordinator.owned  # no longer served once b holds them
    a._heartbeat()  # the dashboard's row shows the partitions held, not those handed over
    assert Dispatcher.objects.get(name="a").partitions == sorted(a.coordinator.owned)


def test_polling_only_a_dead_peers_partitions_are_served_at_once_then_shared(loops, settings):
    """Without NOTIFY only the dead peer's watcher hears of it at once: it adopts every
    orphan, and hands the others their share at the next rounds without a gap."""
    settings.TEMPO = {**settings.TEMPO, "DISPATCH_NOTIFY": False}
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 0.1}
    a, b, c = (loops(name, RecordingPublisher()) for name in "abc")
    run_until(
        lambda: sorted(len(x.coordinator.owned) for x in (a, b, c)) == [5, 5, 6]
        and waits_on(a)
        and waits_on(b)
        and waits_on(c),
        a,
        b,
        c,
        timeout=15,
    )
    for x in (a, b, c):  # the next periodic round a minute away
        x.settings = dataclasses.replace(x.settings, coordination_seconds=60)
        x.next_coordination = x.now_ms() + 60_000
    orphans = set(c.coordinator.owned)
    c.stop()  # a graceful stop: its session ends, its watcher's instance hears of it
    began = time.monotonic()
    run_until(lambda: a._served_set() | b._served_set() == set(range(16)), a, b)
    assert time.monotonic() - began < 5  # not at the round a minute away
    adopter = a if orphans <= a.coordinator.owned else b
    assert orphans <= adopter.coordinator.owned
    for x in (a, b):
        x.settings = dataclasses.replace(x.settings, coordination_seconds=0.1)
        x.next_coordination = 0.0
    step_each_checking(
        [a, b],
        lambda: every_partition_served(a, b),
        until=lambda: len(a.coordinator.owned) == len(b.coordinator.owned) == 8
        and not (a.coordinator.handing_over or b.coordinator.handing_over),
    )
    assert a.coordinator.owned.isdisjoint(b.coordinator.owned)


def test_a_share_not_free_yet_is_looked_for_again_within_a_round(loops, settings):
    """A dead peer's session lets its partition locks go one by one, and the watcher can
    wake the survivors before the last is gone. Below its share after that round, a
    survivor looks again at once, not a round (here a minute) later."""
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 60}
    a = loops("a", RecordingPublisher())
    run_until(lambda: len(a.coordinator.owned) == 16, a)
    b = loops("b", RecordingPublisher())
    run_until(
        lambda: len(a.coordinator.owned) == len(b.coordinator.owned) == 8
        and a.next_coordination > a.now_ms() + 10_000
        and waits_on(b),
        a,
        b,
    )
    with psycopg.connect(**session_params(), autocommit=True) as lingering:
        # A session queued for b's partitions: when b's session ends they pass to it, as
        # if b's own session still held them while a hears that b is gone.
        holder = threading.Thread(
            target=lingering.execute,
            args=(
                "SELECT count(pg_advisory_lock(%s, p)) FROM unnest(%s::int[]) AS p",
                [sql.PARTITION_LOCK_CLASS, sorted(b.coordinator.owned)],
            ),
        )
        holder.start()
        run_until(lambda: queued_for_partitions() == 1, a, timeout=5)
        b.coordinator._conn.close()  # its session ends as if the process died
        holder.join(timeout=5)
        for _ in range(5):  # a hears of b's end (its watcher) and rebalances
            a.step(wait=True)
        assert len(a.coordinator.owned) == 8  # the rest are held, not free
        lingering.execute("SELECT pg_advisory_unlock_all()")
        released = time.monotonic()
        run_until(lambda: len(a.coordinator.owned) == 16, a, timeout=5)
        assert time.monotonic() - released < 2  # the round is a minute away


def queued_for_partitions() -> int:
    """Sessions waiting for a partition lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory'"
            f" AND NOT granted AND classid = %s AND {THIS_DATABASE}",
            [sql.PARTITION_LOCK_CLASS],
        )
        return cursor.fetchone()[0]


def test_a_critical_job_is_claimed_further_ahead_than_the_others(loops, publisher, settings):
    """At or above the critical priority a job is claimed TEMPO_CRITICAL_LEAD_MS ahead
    (its message and a worker thread ready at run time on busy cores); the others keep
    the dispatch lead."""
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 0.1}
    settings.TEMPO = {
        **settings.TEMPO,
        "DISPATCH_LEAD_MS": 20,
        "CRITICAL_LEAD_MS": 400,
    }
    run_at = timezone.now() + dt.timedelta(seconds=1.5)
    normal = job_schedule(handler=HANDLER, run_at=run_at, priority=5)
    critical = job_schedule(handler=HANDLER, run_at=run_at, priority=9)
    loop = loops("d1", publisher)
    loop.step(wait=False)
    extra = loop.lead_ms() - 20  # the measured round trips, the same for both
    assert loop.lead_ms(9) == 400 + extra and loop.lead_ms(5) == 20 + extra
    run_until(lambda: len(publisher.claims) == 2, loop)
    claimed = dict(Job.objects.filter(run_at=run_at).values_list("id", "claimed_at"))
    normal_lead = run_at - claimed[normal.id]
    critical_lead = run_at - claimed[critical.id]
    assert critical_lead >= dt.timedelta(milliseconds=300)  # 400 ms ahead, give or take
    assert normal_lead <= dt.timedelta(milliseconds=20 + extra + CLAIM_ROUND_MS + 2)
    # never more than the dispatch lead for all: a critical lead below it is ignored
    settings.TEMPO = {**settings.TEMPO, "CRITICAL_LEAD_MS": 5}
    assert DispatcherLoop(name="d2", publisher=publisher).lead_ms(9) == 20


def test_a_steady_stream_is_claimed_and_sent_in_rounds(loops, publisher, fast, monkeypatch):
    """Jobs 2 ms apart: claimed a round (CLAIM_ROUND_MS) at a time, and, once the
    workers have said their handlers are fast, each round's jobs in one message."""
    WorkerProcess.objects.create(
        name="w", hostname="h", pid=1, queues=["default"], slowest_handler_ms=0.2
    )
    first = timezone.now() + dt.timedelta(seconds=1.5)
    jobs = [
        job_schedule(handler=HANDLER, run_at=first + dt.timedelta(milliseconds=2 * i))
        for i in range(40)
    ]
    statements = []

    def claim_due(**kwargs):
        statements.append(kwargs["ids"])
        return job_claim_due(**kwargs)

    monkeypatch.setattr(loop_module, "job_claim_due", claim_due)
    loop = loops("d1", publisher)
    run_until(lambda: len(publisher.claims) == len(jobs), loop)
    rounds = -(-80 // CLAIM_ROUND_MS) + 1  # the span, and a round it may straddle
    assert len([ids for ids in statements if ids != [-1]]) <= rounds  # the warm-up's: -1
    assert len(publisher.batches) <= rounds
    assert sorted(claim[0] for claim in publisher.claims) == [job.id for job in jobs]
