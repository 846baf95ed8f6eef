"""Occurrence times, slices and schedule changes: pure, no database."""

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasksapp.recurring.schedule import (
    Grid,
    Schedule,
    SliceKey,
    phase_offset,
    slice_bounds,
    slice_of,
)

UTC = dt.UTC
EPOCH = dt.datetime(2026, 1, 1, tzinfo=UTC)
DAY = dt.timedelta(days=1)
MONTH = dt.timedelta(days=30)

phases = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
slice_counts = st.integers(min_value=1, max_value=10_000)
periods = st.integers(min_value=60, max_value=366 * 86_400).map(lambda s: dt.timedelta(seconds=s))


def daily(slices: int = 4) -> Schedule:
    return Schedule(Grid(EPOCH, 0, DAY, slices))


def test_the_probabilistic_planning_articles_example_times():
    """Phases 0.2, 0.45, 0.77, 0.84 of a day: 04:48, 10:48, 18:28:48, 20:09:36."""
    grid = Grid(EPOCH, 0, DAY, 1)
    times = [grid.occurrence(0, p).time() for p in (0.2, 0.45, 0.77, 0.84)]
    assert times == [dt.time(4, 48), dt.time(10, 48), dt.time(18, 28, 48), dt.time(20, 9, 36)]


@given(phase=phases, period=periods, k=st.integers(min_value=0, max_value=1000))
def test_two_occurrences_of_a_member_are_exactly_one_period_apart(phase, period, k):
    grid = Grid(EPOCH, 0, period, 1)
    assert grid.occurrence(k + 1, phase) - grid.occurrence(k, phase) == period


@given(phase=phases, period=periods)
def test_an_occurrence_lies_within_its_period(phase, period):
    offset = phase_offset(phase, period)
    assert dt.timedelta(0) <= offset <= period


@given(phase=phases, slices=slice_counts)
def test_every_phase_lies_in_exactly_the_slice_slice_of_names(phase, slices):
    index = slice_of(phase, slices)
    low, high = slice_bounds(index, slices)
    assert low <= phase < high
    others = [i for i in (index - 1, index + 1) if 0 <= i < slices]
    for other in others:
        low, high = slice_bounds(other, slices)
        assert not low <= phase < high


@given(slices=slice_counts)
def test_slices_tile_the_unit_interval(slices):
    bounds = [slice_bounds(i, slices) for i in range(slices)]
    assert bounds[0][0] == 0.0 and bounds[-1][1] == 1.0
    assert all(bounds[i][1] == bounds[i + 1][0] for i in range(slices - 1))


def test_slice_windows_are_contiguous_across_periods():
    schedule = daily(slices=3)
    key = SliceKey(0, 0)
    windows = []
    for _ in range(7):
        windows.append(schedule.window(key))
        key = schedule.next_slice(key)
    assert windows[0][0] == EPOCH and windows[3][0] == EPOCH + DAY
    assert all(windows[i][1] == windows[i + 1][0] for i in range(6))


@given(phase=phases, slices=st.integers(min_value=1, max_value=500), k=st.integers(0, 1000))
def test_a_members_occurrence_lies_in_its_slices_window(phase, slices, k):
    grid = Grid(EPOCH, 0, MONTH, slices)
    start, end = grid.slice_window(k, slice_of(phase, slices))
    assert start <= grid.occurrence(k, phase) <= end


def test_period_at_finds_the_period_and_counts_back_before_the_epoch():
    grid = Grid(EPOCH, 0, DAY, 1)
    assert grid.period_at(EPOCH) == 0
    assert grid.period_at(EPOCH + 2.5 * DAY) == 2
    assert grid.period_at(EPOCH - dt.timedelta(seconds=1)) == -1


def test_slices_to_plan_covers_the_horizon_in_order():
    schedule = daily(slices=4)
    now = EPOCH + dt.timedelta(hours=7)
    keys = list(schedule.slices_to_plan(last=None, not_before=now, until=now + DAY))
    assert keys == [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]


def test_slices_to_plan_continues_after_the_last_planned():
    schedule = daily(slices=4)
    now = EPOCH + dt.timedelta(hours=7)
    keys = list(schedule.slices_to_plan(last=SliceKey(1, 0), not_before=now, until=now + DAY))
    assert keys == [(1, 1)]


def test_slices_to_plan_skips_slices_that_ended_before_not_before():
    schedule = daily(slices=4)
    now = EPOCH + dt.timedelta(days=3, hours=13)
    keys = list(schedule.slices_to_plan(last=SliceKey(0, 1), not_before=now, until=now))
    assert keys == [(3, 2)]


def test_slices_to_plan_waits_for_an_epoch_in_the_future():
    schedule = Schedule(Grid(EPOCH, 0, DAY, 2))
    before = EPOCH - 3 * DAY
    assert list(schedule.slices_to_plan(last=None, not_before=before, until=before + DAY)) == []
    keys = list(schedule.slices_to_plan(last=None, not_before=before, until=EPOCH + DAY))
    assert keys == [(0, 0), (0, 1)]


@given(
    phase=phases,
    count=st.integers(min_value=1, max_value=5),
    seconds=st.integers(min_value=-10 * 86_400, max_value=100 * 86_400),
)
def test_next_runs_are_the_first_occurrences_at_or_after(phase, count, seconds):
    schedule = daily()
    after = EPOCH + dt.timedelta(seconds=seconds)
    runs = schedule.next_runs(phase, after=after, count=count)
    assert len(runs) == count and runs[0] >= after
    assert all(b - a == DAY for a, b in zip(runs, runs[1:], strict=False))
    earlier = runs[0] - DAY
    assert earlier < after or earlier < EPOCH


def test_change_applies_from_the_next_boundary_after_the_last_planned_slice():
    schedule = daily(slices=4)
    now = EPOCH + dt.timedelta(days=5, hours=3)
    assert schedule.change_period(last=None, now=now) == 6
    assert schedule.change_period(last=SliceKey(6, 1), now=now) == 7
    assert schedule.change_period(last=None, now=EPOCH - DAY) == 0


def test_a_change_before_the_first_period_replaces_the_grid():
    changed = daily().changed(at=0, period=2 * DAY, slices=8)
    assert changed == Schedule(Grid(EPOCH, 0, 2 * DAY, 8))


def test_a_change_keeps_period_numbers_and_the_switch_time():
    changed = daily(slices=4).changed(at=6, period=dt.timedelta(hours=12), slices=2)
    assert changed.pending == Grid(EPOCH + 6 * DAY, 6, dt.timedelta(hours=12), 2)
    assert changed.grid_for(5).period == DAY and changed.grid_for(6).slices == 2
    assert changed.next_slice(SliceKey(5, 3)) == (6, 0)
    assert changed.next_slice(SliceKey(6, 1)) == (7, 0)
    assert changed.window(SliceKey(7, 0))[0] == EPOCH + 6.5 * DAY


@given(
    phase=phases,
    old=periods,
    new=periods,
    switch=st.integers(min_value=1, max_value=50),
)
def test_a_change_never_runs_a_member_twice_or_skips_it(phase, old, new, switch):
    """Around the switch the gap between two runs is between the old and the new period."""
    schedule = Schedule(Grid(EPOCH, 0, old, 1)).changed(at=switch, period=new, slices=1)
    before, after = schedule.occurrence(switch - 1, phase), schedule.occurrence(switch, phase)
    boundary = schedule.pending.start
    assert before <= boundary <= after
    tolerance = dt.timedelta(microseconds=1)
    assert min(old, new) - tolerance <= after - before <= max(old, new) + tolerance


def test_settled_drops_a_change_that_has_not_begun_and_keeps_one_that_has():
    changed = daily().changed(at=6, period=2 * DAY, slices=1)
    assert changed.settled(last=SliceKey(5, 3), now=EPOCH + 5 * DAY) == daily()
    begun = changed.settled(last=SliceKey(5, 3), now=EPOCH + 6 * DAY)
    assert begun == Schedule(Grid(EPOCH + 6 * DAY, 6, 2 * DAY, 1))
    planned = changed.settled(last=SliceKey(6, 0), now=EPOCH + 5 * DAY)
    assert planned == begun


def test_changed_requires_a_settled_schedule():
    changed = daily().changed(at=6, period=2 * DAY, slices=1)
    with pytest.raises(ValueError, match="settle the pending change first"):
        changed.changed(at=7, period=DAY, slices=1)


@given(phase=phases, slices=st.integers(min_value=1, max_value=100))
def test_planning_the_slices_of_a_period_plans_every_member_once(phase, slices):
    hits = [
        i for i in range(slices) if slice_bounds(i, slices)[0] <= phase < slice_bounds(i, slices)[1]
    ]
    assert hits == [slice_of(phase, slices)]
