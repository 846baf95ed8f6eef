"""A rate-limited queue's limit holds at the start too: messages that reach the workers
together (a worker that fell behind) do not make their handlers begin together."""

import threading

import pytest
from django.db import OperationalError, connection, connections

from tasksapp.engine.models import Job, JobQueue, JobState
from tasksapp.engine.transitions import job_claim_due, queue_take_start
from tasksapp.engine.worker.executor import execute_batch
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)
NOOP = "tests.handlers.recording.noop"


def side_by_side(count: int, action) -> list:
    """Run `action()` on `count` threads released at one instant; their answers."""
    answers, barrier = [None] * count, threading.Barrier(count)

    def run(index: int) -> None:
        try:
            barrier.wait()
            answers[index] = action()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return answers


def run_together(queue: str, count: int) -> list:
    """`count` jobs of the queue claimed, their messages (one job each) run at once on as
    many slots, as a worker that fell behind receives them; when their handlers began."""
    jobs = [JobFactory(queue=queue, handler=NOOP, delivery="at_least_once") for _ in range(count)]
    claims = job_claim_due(ids=[j.id for j in jobs], owner="d", ttl=30)
    messages = iter([[[c.id, c.token, c.run_at_ms]] for c in claims])
    lock = threading.Lock()

    def next_message() -> int:
        with lock:
            message = next(messages)
        return execute_batch(message)

    assert side_by_side(count, next_message) == [1] * count
    succeeded = Job.objects.filter(state=JobState.SUCCEEDED)
    return sorted(succeeded.values_list("started_at", flat=True))  # when the handler began


def test_bunched_messages_of_a_rate_limited_queue_begin_at_its_rate():
    JobQueue.objects.create(name="api", rate_limit=10, rate_period=1.0)  # a burst of 2
    began = run_together("api", 6)
    assert len(began) == 6
    gaps = [(b - a).total_seconds() for a, b in zip(began, began[1:], strict=False)]
    # Two at once (the burst), then one every 100 ms: the sixth 0.4 s after the first.
    assert (began[-1] - began[0]).total_seconds() >= 0.38
    assert sum(1 for gap in gaps if gap < 0.05) <= 1


def test_a_queue_without_a_rate_limit_starts_bunched_messages_at_once():
    began = run_together("bulk", 4)
    assert len(began) == 4 and (began[-1] - began[0]).total_seconds() < 0.3


@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent sessions")
def test_workers_reserving_starts_at_once_each_get_a_moment_of_their_own():
    # 2 starts a minute: a burst of one, then one every 30 s; eight sessions ask at once.
    answers = side_by_side(8, lambda: queue_take_start(queue="api", limit=2, period=60.0))
    assert sorted(answers) == [pytest.approx(30.0 * n, abs=0.5) for n in range(8)]


def test_the_limits_last_read_hold_while_the_database_cannot_be_read(monkeypatch):
    from tasksapp.engine.worker import start_rate

    answers = iter([{"api": (10, 1.0)}])

    def read_limits():
        answer = next(answers, None)
        if answer is None:
            raise OperationalError("the database is restarting")
        return answer

    monkeypatch.setattr(start_rate, "queue_rate_limits", read_limits)
    rates = start_rate.StartRates()
    assert rates.limit_of("api") == (10, 1.0)
    rates.forget()  # the next look reads again, and fails
    assert rates.limit_of("api") == (10, 1.0) and rates.limit_of("bulk") is None
