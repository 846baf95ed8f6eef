"""The dispatcher's timing wheel: pure, no database."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasksapp.engine.dispatcher.wheel import TimingWheel

DAY_MS = 24 * 3600 * 1000


def bucket_start(due_ms: int, tick_ms: int) -> int:
    return due_ms - due_ms % tick_ms


def drain(wheel: TimingWheel, until_ms: int | None = None) -> tuple[list[tuple[int, list]], int]:
    """Jump from expiration to expiration as a sleeping caller would.

    Returns the (time, popped keys) of every pop_due call and how many calls it took.
    """
    popped: list[tuple[int, list]] = []
    calls = 0
    while True:
        at = wheel.next_expiration()
        if at is None or (until_ms is not None and at > until_ms):
            break
        calls += 1
        keys = wheel.pop_due(at)
        if keys:
            popped.append((at, keys))
        assert calls < 100_000, "the wheel keeps asking to be woken up"
    if until_ms is not None:
        calls += 1
        popped.append((until_ms, wheel.pop_due(until_ms)))
    return popped, calls


def test_constructor_rejects_a_zero_tick_or_a_single_bucket():
    with pytest.raises(ValueError):
        TimingWheel(tick_ms=0)
    with pytest.raises(ValueError):
        TimingWheel(size=1)


def test_empty_wheel():
    wheel = TimingWheel()
    assert len(wheel) == 0
    assert wheel.next_expiration() is None
    assert wheel.pop_due(10**9) == []
    assert list(wheel.keys()) == []
    assert 1 not in wheel


@pytest.mark.parametrize(("tick_ms", "size"), [(1, 256), (1, 4), (10, 8), (7, 2)])
def test_every_key_pops_exactly_once_in_its_own_bucket(tick_ms, size):
    rng = random.Random(tick_ms * 1000 + size)
    start = 12_345
    wheel = TimingWheel(tick_ms=tick_ms, size=size, start_ms=start)
    dues = {key: start + rng.randrange(1, 200_000) for key in range(2_000)}
    for key, due in dues.items():
        assert wheel.add(key, due) is True
    assert len(wheel) == len(dues)
    assert set(wheel.keys()) == set(dues)

    popped, _ = drain(wheel)

    seen = [key for _, keys in popped for key in keys]
    assert sorted(seen) == sorted(dues)  # all of them, each once
    for at, keys in popped:
        for key in keys:
            # Never before its bucket, and within one tick of it when woken at the
            # expiration the wheel announced.
            assert bucket_start(dues[key], tick_ms) == at
            assert at <= dues[key] < at + tick_ms
    assert len(wheel) == 0
    assert wheel.next_expiration() is None


def test_with_a_one_ms_tick_nothing_pops_before_its_due_time():
    wheel = TimingWheel(start_ms=0)
    for key, due in enumerate([5, 5, 6, 300, 70_000, 70_001]):
        wheel.add(key, due)
    assert wheel.pop_due(4) == []
    assert sorted(wheel.pop_due(5)) == [0, 1]
    assert wheel.pop_due(299) == [2]
    assert wheel.pop_due(69_999) == [3]
    assert wheel.pop_due(70_000) == [4]
    assert wheel.pop_due(70_001) == [5]
    assert len(wheel) == 0


def test_pop_due_catches_up_over_a_long_gap():
    wheel = TimingWheel(tick_ms=1, size=4)
    dues = {key: key * 19 + 1 for key in range(500)}  # up to 9_482
    for key, due in dues.items():
        wheel.add(key, due)
    assert sorted(wheel.pop_due(10_000)) == sorted(dues)
    assert wheel.next_expiration() is None


def test_adding_the_same_key_twice_keeps_one_entry():
    wheel = TimingWheel(tick_ms=10)
    assert wheel.add("job", 120) is True
    assert wheel.add("job", 120) is False
    assert len(wheel) == 1
    # Another time in the same tick still moves the key, it never duplicates it.
    assert wheel.add("job", 125) is True
    assert len(wheel) == 1
    assert list(wheel.keys()) == ["job"]
    assert wheel.pop_due(130) == ["job"]
    assert wheel.pop_due(10_000) == []


def test_re_adding_with_another_due_time_moves_the_key():
    wheel = TimingWheel()
    wheel.add("job", 100)
    assert wheel.add("job", 5_000) is True
    assert len(wheel) == 1
    assert wheel.next_expiration() > 100
    assert wheel.pop_due(4_999) == []
    assert wheel.pop_due(5_000) == ["job"]

    wheel.add("early", 9_000)
    assert wheel.add("early", 6_000) is True
    assert wheel.pop_due(6_000) == ["early"]
    assert wheel.pop_due(9_000) == []


def test_re_adding_an_already_due_key():
    wheel = TimingWheel(start_ms=1_000)
    assert wheel.add("late", 400) is True
    assert wheel.add("late", 400) is False
    assert len(wheel) == 1
    assert wheel.add("late", 2_000) is True  # moved back into the future
    assert wheel.pop_due(1_000) == []
    assert wheel.pop_due(2_000) == ["late"]


def test_remove():
    wheel = TimingWheel()
    wheel.add("a", 10)
    wheel.add("b", 10)
    wheel.add("c", 100_000)
    assert wheel.remove("a") is True
    assert wheel.remove("a") is False
    assert wheel.remove("never") is False
    assert wheel.remove("c") is True
    assert "a" not in wheel and "b" in wheel
    assert len(wheel) == 1
    assert wheel.pop_due(100_000) == ["b"]
    assert wheel.remove("b") is False


def test_remove_an_already_due_key():
    wheel = TimingWheel(start_ms=500)
    wheel.add("late", 1)
    assert "late" in wheel
    assert wheel.remove("late") is True
    assert wheel.pop_due(500) == []
    assert len(wheel) == 0


def test_an_emptied_bucket_is_found_again_when_refilled():
    wheel = TimingWheel()
    wheel.add("a", 5)
    wheel.remove("a")
    assert wheel.next_expiration() is None  # drops the empty bucket from the heap
    wheel.add("b", 5)
    assert wheel.next_expiration() == 5
    assert wheel.pop_due(10) == ["b"]


def test_remove_where():
    wheel = TimingWheel(start_ms=1_000)
    for key in range(20):
        wheel.add(key, 1_000 + key * 50_000)
    wheel.add(100, 10)  # already due
    removed = wheel.remove_where(lambda key: key % 2 == 0)
    assert removed == 11
    assert sorted(wheel.keys()) == list(range(1, 20, 2))
    assert wheel.remove_where(lambda key: False) == 0
    popped, _ = drain(wheel)
    assert sorted(key for _, keys in popped for key in keys) == list(range(1, 20, 2))


@pytest.mark.parametrize("ahead_ms", [DAY_MS, 10 * DAY_MS, 400 * DAY_MS])
def test_a_timer_far_ahead_cascades_down_and_pops_on_time(ahead_ms):
    start = 1_700_000_000_000
    wheel = TimingWheel(start_ms=start)
    due = start + ahead_ms + 1_234
    wheel.add("far", due)

    popped, calls = drain(wheel)

    assert popped == [(due, ["far"])]
    # One wake-up per level crossed at most, not one per elapsed tick.
    assert calls <= 6


def test_timers_on_every_level_pop_at_their_due_time():
    start = 1_000
    wheel = TimingWheel(tick_ms=1, size=16, start_ms=start)
    dues = {f"t{n}": start + 3 * 16**n + n for n in range(1, 9)}  # up to ~4 * 10**9 ms
    for key, due in dues.items():
        wheel.add(key, due)

    popped, calls = drain(wheel)

    assert [(at, keys) for at, keys in popped] == [(due, [key]) for key, due in dues.items()]
    assert calls <= len(dues) * 10


def test_wakeups_grow_with_busy_buckets_not_with_elapsed_time():
    rng = random.Random(3)
    wheel = TimingWheel(start_ms=0)
    dues = [rng.randrange(DAY_MS, 30 * DAY_MS) for _ in range(200)]
    for key, due in enumerate(dues):
        wheel.add(key, due)

    popped, calls = drain(wheel)

    assert sum(len(keys) for _, keys in popped) == len(dues)
    # 200 timers over a month of 1 ms ticks: each may cross at most a few levels.
    assert calls <= 200 * 5


def test_already_due_timers_pop_at_the_next_call():
    wheel = TimingWheel(start_ms=10_000)
    wheel.add("past", 9_000)
    wheel.add("now", 10_000)
    assert wheel.next_expiration() == 10_000
    assert sorted(wheel.pop_due(10_000)) == ["now", "past"]

    wheel.pop_due(20_000)
    wheel.add("behind", 15_000)
    # Due already: returned even if the caller's clock reads earlier than the wheel's.
    assert wheel.next_expiration() <= 20_000
    assert wheel.pop_due(20_000) == ["behind"]
    wheel.add("behind again", 15_000)
    assert wheel.pop_due(0) == ["behind again"]


def test_next_expiration_never_oversleeps_a_timer():
    wheel = TimingWheel(start_ms=0)
    wheel.add("a", 3 * DAY_MS)
    wheel.add("b", 90_000)
    at = wheel.next_expiration()
    assert at is not None and at <= 90_000
    popped, _ = drain(wheel)
    assert popped == [(90_000, ["b"]), (3 * DAY_MS, ["a"])]


# --- property test against a plain dict --------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 30), st.integers(-2_000, 300_000)),
        st.tuples(st.just("remove"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("remove_odd"), st.just(0), st.just(0)),
        st.tuples(st.just("advance"), st.just(0), st.integers(0, 120_000)),
        st.tuples(st.just("jump"), st.just(0), st.integers(1, 8)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(
    tick_ms=st.sampled_from([1, 3, 10]),
    size=st.sampled_from([2, 4, 16, 256]),
    start_ms=st.integers(0, 10**6),
    ops=operations,
)
def test_behaves_like_a_dict_of_due_times(tick_ms, size, start_ms, ops):
    wheel = TimingWheel(tick_ms=tick_ms, size=size, start_ms=start_ms)
    model: dict[int, int] = {}
    now = start_ms  # the latest time given to pop_due

    def check_popped(at: int, keys: list) -> None:
        assert len(keys) == len(set(keys))
        reference = max(at, now)
        for key in keys:
            assert key in model, f"{key} popped twice or never added"
            assert bucket_start(model.pop(key), tick_ms) <= reference
        # After pop_due(t), nothing whose bucket has started by t is left behind.
        assert all(bucket_start(due, tick_ms) > reference for due in model.values())

    def check_announced_wakeup(at: int, keys: list) -> None:
        # Woken at the announced time, a key pops within one tick of its bucket.
        for key_due in keys:
            start = max(bucket_start(key_due, tick_ms), now)
            assert start - tick_ms < at <= start

    for op, key, value in ops:
        if op == "add":
            due = now + value
            added = wheel.add(key, due)
            assert added == (model.get(key) != due)
            model[key] = due
        elif op == "remove":
            assert wheel.remove(key) == (key in model)
            model.pop(key, None)
        elif op == "remove_odd":
            odd = [k for k in model if k % 2]
            assert wheel.remove_where(lambda k: k % 2 == 1) == len(odd)
            for k in odd:
                del model[k]
        elif op == "advance":
            at = now + value
            check_popped(at, wheel.pop_due(at))
            now = max(now, at)
        else:  # jump to the announced expiration, `value` times
            for _ in range(value):
                at = wheel.next_expiration()
                if at is None:
                    break
                dues = model.copy()
                keys = wheel.pop_due(at)
                check_announced_wakeup(at, [dues[k] for k in keys])
                check_popped(at, keys)
                now = max(now, at)

        assert len(wheel) == len(model)
        assert set(wheel.keys()) == set(model)
        assert all(k in wheel for k in model)
        announced = wheel.next_expiration()
        if not model:
            assert announced is None
        else:
            assert announced is not None
            assert announced <= max(now, min(bucket_start(d, tick_ms) for d in model.values()))

    popped, _ = drain(wheel)
    for at, keys in popped:
        check_popped(at, keys)
        now = max(now, at)
    assert model == {}
