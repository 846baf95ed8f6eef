"""The worker's bound of the database clock: handlers begin just after run_at, never
before it, with no reading of the clock on the way when a tight bound is at hand."""

import dataclasses
import datetime as dt
import time

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from tasksapp.engine.store.rows import MAX_DRIFT, DatabaseTime
from tasksapp.engine.transitions import database_time, job_claim_due, job_start
from tasksapp.engine.worker import clock
from tests.factories import JobFactory


@pytest.fixture(autouse=True)
def fresh_memory():
    clock.memory.forget()
    yield
    clock.memory.forget()


@pytest.fixture
def readings(monkeypatch):
    """Counts the worker's readings of the database clock (each still a real one)."""
    made = []

    def counted():
        made.append(database_time())
        return made[-1]

    monkeypatch.setattr(clock, "database_time", counted)
    return made


def started_job(ms_ahead: float):
    job = JobFactory(run_at=timezone.now() + dt.timedelta(milliseconds=ms_ahead))
    (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)
    (started,) = job_start(claims=[(claim.id, claim.token)], worker="w", ttl=5)
    return job, started


def loosened_bound(bound: DatabaseTime, ms: float) -> DatabaseTime:
    """The same reading as if its answer had waited `ms` for a busy CPU."""
    return dataclasses.replace(bound, read_ms=bound.read_ms - ms, sent=bound.sent - ms / 1000)


def loosened(started, ms: float):
    """The same start as if its answer had waited `ms` for a busy CPU."""
    return dataclasses.replace(started, clock=loosened_bound(started.clock, ms))


def wait_and_read_database_clock(begins_at: float) -> dt.datetime:
    time.sleep(max(0.0, begins_at - time.monotonic()))
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_loose_start_is_tightened_by_a_reading_during_the_lead(readings):
    """A start answered slowly bounds the clock loosely; a reading at once (150 ms before
    run_at here) brings the begin back to just after run_at, never before it."""
    job, started = started_job(150)
    loose_job = loosened(started, 8)
    (tightened,) = clock.tightened([loose_job])
    assert 1 <= len(readings) <= clock.MAX_READINGS
    # A bound from one round trip is loose by at most that round trip: the 8 ms of slack
    # are gone but for the reading's own round trip (a fraction of a ms when quiet).
    new_round_trip = tightened.clock.round_trip_ms / 1000
    assert loose_job.begins_at - tightened.begins_at >= 0.008 - new_round_trip - 0.0005
    assert wait_and_read_database_clock(tightened.begins_at) >= job.run_at


@pytest.mark.django_db(transaction=True)
def test_a_tight_bound_remembered_from_another_start_spares_the_reading(readings):
    """Another thread's quick answer a moment ago bounds the clock tightly: a slow start
    takes that bound and makes no round trip of its own."""
    job = JobFactory(run_at=timezone.now() + dt.timedelta(milliseconds=300))
    (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)
    quick = next((r for r in (database_time() for _ in range(200)) if r.round_trip_ms < 0.3), None)
    assert quick is not None, "no answer of 200 came within 0.3 ms"
    clock.memory.tightest(quick)
    readings.clear()
    (started,) = job_start(claims=[(claim.id, claim.token)], worker="w", ttl=5)
    assert started.begins_at - time.monotonic() > clock.READ_BEFORE_S
    (tightened,) = clock.tightened([loosened(started, 8)])
    assert readings == []
    assert tightened.clock == quick.tighter(started.clock)
    assert wait_and_read_database_clock(tightened.begins_at) >= job.run_at


@pytest.mark.django_db(transaction=True)
def test_an_old_remembered_bound_is_not_used(readings):
    """A bound older than REMEMBERED_S is dropped (a database that failed over runs on
    another machine's clock): the start's own bound decides, and a reading follows."""
    quick = database_time()
    aged = dataclasses.replace(
        quick,
        read_ms=quick.read_ms - 1500,
        received=quick.received - 1.5,
        sent=quick.sent - 1.5,
    )
    clock.memory.tightest(aged)
    readings.clear()
    job, started = started_job(100)
    loose_job = loosened(started, 8)
    (tightened,) = clock.tightened([loose_job])
    assert len(readings) >= 1
    assert tightened.clock in readings + [loose_job.clock]
    assert wait_and_read_database_clock(tightened.begins_at) >= job.run_at


@pytest.mark.django_db(transaction=True)
def test_no_reading_when_the_run_time_is_too_near(readings):
    """A job due now (a backlog's, or claimed late) is not held up by a round trip."""
    job, started = started_job(-5)
    (tightened,) = clock.tightened([loosened(started, 8)])
    assert readings == []
    assert tightened.begins_at <= time.monotonic()


@pytest.mark.django_db(transaction=True)
def test_readings_stop_after_a_few_when_every_answer_is_slow(monkeypatch):
    """On a saturated machine every answer comes slowly: a batch reads the clock at most
    MAX_READINGS times, then waits on the tightest bound it has."""
    made = []

    def slow_reading():
        made.append(loosened_bound(database_time(), 5))
        return made[-1]

    monkeypatch.setattr(clock, "database_time", slow_reading)
    job, started = started_job(300)
    (tightened,) = clock.tightened([loosened(started, 8)])
    assert len(made) == clock.MAX_READINGS
    assert wait_and_read_database_clock(tightened.begins_at) >= job.run_at


# --- the bound itself, against a simulated database clock --------------------------------

drift = st.floats(min_value=1 - MAX_DRIFT, max_value=1 + MAX_DRIFT)
offsets = st.floats(min_value=-1e6, max_value=1e6)
legs = st.floats(min_value=0, max_value=50)  # ms, each way
ages = st.floats(min_value=0, max_value=5000)  # ms after the answer


def reading(db_ms, sent_ms: float, out_ms: float, back_ms: float) -> DatabaseTime:
    """The bound one round trip gives: the database reads its clock `out_ms` after the
    question left, the answer arrives `back_ms` later (times here in ms of monotonic)."""
    read_at = sent_ms + out_ms
    return DatabaseTime(db_ms(read_at), (read_at + back_ms) / 1000, sent_ms / 1000)


@given(drift, offsets, legs, legs, legs, legs, ages, st.floats(min_value=0, max_value=800))
def test_a_bound_never_runs_ahead_of_the_database_clock(
    rate, offset, out1, back1, out2, back2, age, gap
):
    """Whatever the legs of two round trips and the drift between the clocks (within
    MAX_DRIFT), the tighter bound never shows more than the database clock, and the moment
    it names for a database time comes no earlier than the clock reaches it."""

    def db_ms(local_ms: float) -> float:
        return offset + rate * local_ms

    first = reading(db_ms, 1000.0, out1, back1)
    second = reading(db_ms, 1000.0 + gap, out2, back2)
    bound = first.tighter(second)
    later_ms = max(first.received, second.received) * 1000 + age
    assert bound.at_least_ms(later_ms / 1000) <= db_ms(later_ms) + 1e-6
    target = db_ms(later_ms)
    assert db_ms(bound.moment_of(target) * 1000) >= target - 1e-6
    slack = bound.slack_ms(later_ms / 1000)
    assert db_ms(later_ms) - bound.at_least_ms(later_ms / 1000) <= slack + 1e-6
