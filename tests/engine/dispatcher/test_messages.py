"""How claims become messages: bursts fanned out, jobs spread in time packed into the
messages one slot runs in turn, by what the workers report of their handlers."""

import datetime as dt

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from tasksapp.engine.dispatcher.messages import (
    JOB_OVERHEAD_MS,
    pack_in_turn,
    slowest_handlers_read,
    split_batches,
)
from tasksapp.engine.models import WorkerProcess
from tasksapp.engine.transitions import Claim
from tasksapp.engine.worker.lease_keeper import SlowestHandler


def _spread(count: int, gap_ms: float, start: float = 1000.0) -> list[Claim]:
    return [Claim(i, 1, start + i * gap_ms) for i in range(count)]


def _sizes(batches) -> list[int]:
    return [len(batch) for batch in batches]


def test_a_steady_stream_of_fast_handlers_shares_one_message():
    batches = split_batches(_spread(20, 5.0), fanout=32, max_batch=250, slowest_ms=0.3)
    assert _sizes(batches) == [20]
    assert [row[0] for row in batches[0]] == list(range(20))  # in turn, by run_at


def test_nothing_is_packed_before_the_workers_report_their_handlers():
    assert _sizes(split_batches(_spread(20, 5.0), fanout=32, max_batch=250)) == [1] * 20


def test_a_handler_slower_than_the_gaps_spreads_its_jobs_over_more_messages():
    # 5 ms apart, each holding a slot 8 + 1 ms: every second job would wait in one slot.
    batches = split_batches(_spread(20, 5.0), fanout=32, max_batch=250, slowest_ms=8.0)
    assert _sizes(batches) == [10, 10]
    slow = split_batches(_spread(20, 5.0), fanout=32, max_batch=250, slowest_ms=500.0)
    assert _sizes(slow) == [1] * 20  # as slow as that: a message each, as before


def test_jobs_due_at_one_instant_still_go_to_messages_of_their_own():
    at_once = [Claim(i, 1, 1000.0) for i in range(10)]
    assert _sizes(split_batches(at_once, fanout=32, max_batch=250, slowest_ms=0.1)) == [1] * 10
    many = [Claim(i, 1, 1000.0) for i in range(10_000)]  # a burst: cut by the fan-out
    assert _sizes(split_batches(many, fanout=32, max_batch=250, slowest_ms=0.1)) == [250] * 40


def test_a_packed_message_holds_max_batch_jobs_at_most():
    batches = split_batches(_spread(25, 5.0), fanout=32, max_batch=10, slowest_ms=0.1)
    assert _sizes(batches) == [10, 10, 5]


@given(
    run_ats=st.lists(st.integers(0, 200), min_size=1, max_size=60),
    hold_ms=st.floats(0.1, 50.0),
    max_batch=st.integers(1, 20),
)
def test_packing_keeps_every_job_once_and_none_waiting_for_another(run_ats, hold_ms, max_batch):
    rows = sorted(([i, 1, float(ms)] for i, ms in enumerate(run_ats)), key=lambda r: r[2])
    messages = pack_in_turn(rows, hold_ms=hold_ms, max_batch=max_batch)
    assert sorted(row[0] for m in messages for row in m) == list(range(len(rows)))
    for message in messages:
        assert 1 <= len(message) <= max_batch
        for before, after in zip(message, message[1:], strict=False):
            assert after[2] - before[2] >= hold_ms  # the slot is free at the next instant
    if max_batch >= len(rows):  # uncapped: the fewest, the most slot-holds at one instant
        busiest = max(sum(1 for r in rows if r[2] <= a[2] < r[2] + hold_ms) for a in rows)
        assert len(messages) == busiest


def test_the_slowest_handler_is_the_slowest_of_the_last_two_beats():
    slowest = SlowestHandler()
    assert slowest.take() is None  # nothing ran yet
    slowest.ran(3.0)
    slowest.ran(40.0)
    assert slowest.take() == 40.0
    slowest.ran(2.0)
    assert slowest.take() == 40.0  # the beat before still counts
    assert slowest.take() == 2.0
    assert slowest.take() == 2.0  # idle: the last figure is kept


@pytest.mark.django_db
def test_dispatchers_read_the_slowest_handler_of_each_queue_from_live_workers():
    now = timezone.now()
    rows = [
        ("w1", ["default"], 2.0, now),
        ("w2", ["default", "mail"], 30.0, now),
        ("w3", ["mail"], None, now),  # nothing ran yet
        ("w4", ["reports"], 900.0, now - dt.timedelta(minutes=5)),  # gone quiet
    ]
    for name, queues, ms, beat in rows:
        WorkerProcess.objects.create(
            name=name, hostname="h", pid=1, queues=queues, slowest_handler_ms=ms
        )
        WorkerProcess.objects.filter(name=name).update(heartbeat_at=beat)
    assert slowest_handlers_read(within_seconds=60) == {"default": 30.0, "mail": 30.0}


def test_a_job_shares_a_slot_only_if_the_one_before_is_done_by_its_instant():
    fits = 5.0 - JOB_OVERHEAD_MS  # 5 ms apart: the handler and the overhead fill the gap
    assert _sizes(split_batches(_spread(6, 5.0), fanout=32, max_batch=250, slowest_ms=fits)) == [6]
    over = fits + 0.01
    assert _sizes(split_batches(_spread(6, 5.0), fanout=32, max_batch=250, slowest_ms=over)) == [
        3,
        3,
    ]
