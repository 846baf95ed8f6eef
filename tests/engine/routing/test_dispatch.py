"""Routing in the dispatcher loop, driven step by step against real PostgreSQL: queues,
priorities under backpressure, paused queues, limits counted at claim time, degraded
mode."""

import datetime as dt
import time

import pytest
from django.utils import timezone

from tasksapp.contrib.redis_index import source as redis_source
from tasksapp.engine.dispatcher.loop import DispatcherLoop
from tasksapp.engine.models import Dispatcher, Job, JobState
from tasksapp.engine.queues import (
    queue_configure,
    queue_pause,
    queue_resume,
    routing_degrade,
    routing_restore,
)
from tasksapp.engine.services import job_schedule
from tasksapp.engine.transitions import job_claim_limited
from tests.conftest import RecordingPublisher
from tests.engine.dispatcher.test_loop import run_until

pytestmark = pytest.mark.django_db(transaction=True)
HANDLER = "tests.handlers.recording.noop"


class OneAtATime(RecordingPublisher):
    """A broker whose queue has room for one message at a time (MAX_QUEUED_MESSAGES=1,
    MAX_BATCH=1): one job is claimed per turn, so the claims show the claim order."""

    def backlog(self, queue=None) -> int:
        return 0


@pytest.fixture
def one_by_one(settings):
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 0.1, "MAX_BATCH": 1, "MAX_QUEUED_MESSAGES": 1}


@pytest.fixture
def loop():
    started = []

    def make(publisher=None, name="d1"):
        made = DispatcherLoop(name=name, publisher=publisher or RecordingPublisher())
        made.start()
        started.append(made)
        return made

    yield make
    for made in started:
        made.stop()


def due(**options) -> Job:
    return job_schedule(
        handler=HANDLER, run_at=timezone.now() - dt.timedelta(seconds=0.01), **options
    )


def states(*jobs: Job) -> list[str]:
    return [Job.objects.get(id=job.id).state for job in jobs]


def test_a_job_is_published_to_its_queues_celery_queue(loop, settings):
    billing, plain = due(queue="billing"), due()
    dispatcher = loop()
    run_until(lambda: len(dispatcher.publisher.claims) == 2, dispatcher)
    published = dict(
        zip(
            (batch[0][0] for batch in dispatcher.publisher.batches),
            dispatcher.publisher.queues,
            strict=False,
        )
    )
    assert published == {billing.id: f"{settings.TEMPO['QUEUE']}.billing", plain.id: None}


def test_higher_priority_is_claimed_first_when_there_is_no_room_for_all(loop, one_by_one):
    low = [due(priority=1) for _ in range(3)]
    high = [due(priority="high") for _ in range(2)]
    critical = due(priority=9)
    dispatcher = loop(OneAtATime())
    run_until(lambda: len(dispatcher.publisher.claims) == 6, dispatcher)
    order = [claim[0] for claim in dispatcher.publisher.claims]
    assert order == [critical.id, *(j.id for j in high), *(j.id for j in low)]


def test_a_paused_queue_is_not_claimed_until_resumed(loop):
    queue_pause(name="reports")
    held, other = due(queue="reports"), due()
    dispatcher = loop()
    run_until(lambda: dispatcher.publisher.claims, dispatcher)
    for _ in range(10):
        dispatcher.step(wait=True)
    assert [c[0] for c in dispatcher.publisher.claims] == [other.id]
    assert states(held) == [JobState.SCHEDULED]
    queue_resume(name="reports")  # NOTIFY: no restart, no poll
    run_until(lambda: len(dispatcher.publisher.claims) == 2, dispatcher)
    assert states(held) == [JobState.CLAIMED]


def test_a_concurrency_limit_holds_the_rest_until_a_slot_frees(loop):
    queue_configure(name="sync", concurrency_limit=2)
    jobs = [due(queue="sync") for _ in range(5)]
    dispatcher = loop()
    run_until(lambda: len(dispatcher.publisher.claims) == 2, dispatcher)
    for _ in range(10):
        dispatcher.step(wait=True)
    assert sorted(states(*jobs)).count(JobState.CLAIMED) == 2
    first = dispatcher.publisher.claims[0][0]
    Job.objects.filter(id=first).update(state=JobState.SUCCEEDED)  # one slot frees
    run_until(lambda: len(dispatcher.publisher.claims) == 3, dispatcher)
    for _ in range(10):
        dispatcher.step(wait=True)
    assert len(dispatcher.publisher.claims) == 3


def test_a_limit_change_takes_effect_without_a_restart(loop):
    queue_configure(name="sync", concurrency_limit=1)
    jobs = [due(queue="sync") for _ in range(4)]
    dispatcher = loop()
    run_until(lambda: len(dispatcher.publisher.claims) == 1, dispatcher)
    queue_configure(name="sync", concurrency_limit=3)
    run_until(lambda: len(dispatcher.publisher.claims) == 3, dispatcher)
    queue_configure(name="sync", concurrency_limit=None)
    run_until(lambda: len(dispatcher.publisher.claims) == 4, dispatcher)
    assert states(*jobs) == [JobState.CLAIMED] * 4


def test_a_key_limit_counts_each_key_apart(loop):
    queue_configure(name="sync", key_concurrency_limit=1)
    member_1 = [due(queue="sync", concurrency_key="member:1") for _ in range(3)]
    member_2 = due(queue="sync", concurrency_key="member:2")
    unkeyed = due(queue="sync")
    dispatcher = loop()
    run_until(lambda: len(dispatcher.publisher.claims) == 3, dispatcher)
    for _ in range(10):
        dispatcher.step(wait=True)
    claimed = {c[0] for c in dispatcher.publisher.claims}
    assert claimed == {member_1[0].id, member_2.id, unkeyed.id}


def test_limited_claims_never_exceed_the_limit_however_they_interleave():
    queue_configure(name="sync", concurrency_limit=3)
    ids = [due(queue="sync").id for _ in range(10)]
    first = job_claim_limited(queue="sync", ids=ids[:6], owner="a", ttl=10, room=6)
    second = job_claim_limited(queue="sync", ids=ids[6:], owner="b", ttl=10, room=4)
    assert len(first.claims) == 3 and len(first.held) == 3
    assert second.claims == [] and sorted(second.held) == ids[6:]
    assert Job.objects.filter(queue="sync", state=JobState.CLAIMED).count() == 3


def test_a_rate_limit_holds_jobs_back_as_due_not_failed(loop):
    queue_configure(name="api", rate_limit=2, rate_period=60)  # one start every 30 s
    jobs = [due(queue="api") for _ in range(3)]
    dispatcher = loop()
    run_until(lambda: dispatcher.publisher.claims, dispatcher)
    for _ in range(10):
        dispatcher.step(wait=True)
    assert sorted(states(*jobs)) == [JobState.CLAIMED, JobState.SCHEDULED, JobState.SCHEDULED]
    planned = None  # (None for a moment after a nudge: the rules read again)
    deadline = time.monotonic() + 5
    while planned is None and time.monotonic() < deadline:
        planned = dispatcher.claimer.limited.retry_at
    assert planned is not None
    assert planned >= dispatcher.now_ms() + 25_000  # the next start's time


def test_degraded_mode_claims_only_critical_jobs_then_resumes_by_priority(loop, one_by_one):
    routing_degrade(reason="billing database failover", critical_priority=8)
    low, high, critical = due(priority=2), due(priority=7), due(priority=8)
    dispatcher = loop(OneAtATime())
    run_until(lambda: dispatcher.publisher.claims, dispatcher)
    for _ in range(10):
        dispatcher.step(wait=True)
    assert [c[0] for c in dispatcher.publisher.claims] == [critical.id]
    reason = Dispatcher.objects.get(name="d1").degraded_reason
    assert reason == "switched on by an operator: billing database failover"
    routing_restore()
    run_until(lambda: len(dispatcher.publisher.claims) == 3, dispatcher)
    assert [c[0] for c in dispatcher.publisher.claims] == [critical.id, high.id, low.id]
    assert Dispatcher.objects.get(name="d1").degraded_reason == ""


class FullDefaultQueue(RecordingPublisher):
    """The default queue's Celery queue is full (its workers cannot keep up); the other
    queues have room."""

    def backlog(self, queue=None) -> int:
        return 10_000 if queue is None else 0


def test_a_lasting_backlog_switches_degraded_mode_on_for_a_spell(loop, settings):
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 0.1}
    settings.TEMPO = {
        **settings.TEMPO,
        "DEGRADED_BACKLOG": 3,
        "DEGRADED_AFTER_SECONDS": 0.5,
    }
    backlog = [due(priority=5) for _ in range(5)]  # held back: their queue is full
    dispatcher = loop(FullDefaultQueue())
    run_until(lambda: dispatcher.degraded_reason, dispatcher)
    record = Dispatcher.objects.get(name="d1").degraded_reason
    assert record == "more than 3 due jobs waited unclaimed for over 0.5 s"
    low, critical = due(queue="urgent", priority=5), due(queue="urgent", priority=9)
    run_until(lambda: dispatcher.publisher.claims, dispatcher)
    assert [c[0] for c in dispatcher.publisher.claims] == [critical.id]
    assert states(low) == [JobState.SCHEDULED] and dispatcher.degraded_reason
    run_until(lambda: len(dispatcher.publisher.claims) == 2, dispatcher)  # the spell ends
    assert dispatcher.publisher.claims[1][0] == low.id
    assert states(*backlog) == [JobState.SCHEDULED] * 5  # their queue is still full


def test_a_lost_redis_index_switches_degraded_mode_on(loop, settings, monkeypatch):
    """Redis mode with the index unreachable (nothing listens on its port): every shard
    is polled from the database, and only critical jobs are claimed until it is back."""
    settings.TEMPO = {
        **settings.TEMPO,
        "DISPATCH_MODE": "redis",
        "INDEX_REDIS_URL": "redis://127.0.0.1:9/0",  # the discard port: refused
    }
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 0.1}
    monkeypatch.setattr(redis_source, "CHECK_SECONDS", 0.1)
    low, critical = due(priority=5), due(priority=9)
    dispatcher = loop()
    run_until(lambda: dispatcher.publisher.claims, dispatcher)
    for _ in range(10):
        dispatcher.step(wait=True)
    assert [c[0] for c in dispatcher.publisher.claims] == [critical.id]
    assert states(low) == [JobState.SCHEDULED]
    record = Dispatcher.objects.get(name="d1")
    assert record.dispatch_mode == "redis-unreachable"
    assert record.degraded_reason == "the Redis due index cannot be reached"
