"""Occurrence times and slices: pure functions of a task's grid and a member's phase.

A grid says: period `first` starts at `start`, every period lasts `period` and is planned
in `slices` slices. Then, for a member with phase p in [0, 1):

- occurrence k runs at  start + (k - first) × period + ⌊p × period⌋  (to the microsecond);
- slice s of period k holds the members with  s/S ≤ p < (s+1)/S, so it covers the time
  window  [period_start(k) + ⌊s/S × period⌋, period_start(k) + ⌊(s+1)/S × period⌋).

In the probabilistic planning article's notation (epoch E, first = 0): occurrence k at
E + (k + p) × T. The time between two occurrences of one member is exactly one period,
and no member's time depends on any other member.

A grid with a time zone (`zone`, not "UTC") follows that zone's calendar days: its
period is whole days, period k starts at local midnight of the k-th period's first day
(`localtime.local_midnight`) and a member runs at the wall-clock time ⌊p × period⌋ after
it, mapped to an instant by `localtime` (23- and 25-hour days, a skipped time at the
jump, a doubled one at its first occurrence). Slices are the same phase ranges; their
windows are their bounds' wall times mapped the same way (see docs/PLANNING.md).

A task's schedule is its current grid and, after a change of period or slice count, the
grid that takes over at a later period boundary (`pending`). Period numbers continue
across the switch, so (task, period, slice) identifies a slice for ever.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from typing import NamedTuple

from tasksapp.recurring import localtime

MICROSECOND = dt.timedelta(microseconds=1)


def phase_offset(phase: float, period: dt.timedelta) -> dt.timedelta:
    """Where in a period a member with `phase` runs: ⌊phase × period⌋ in microseconds.

    The planner's SQL computes the same float8 product and floor, so both agree exactly.
    """
    return dt.timedelta(microseconds=math.floor(phase * (period // MICROSECOND)))


def slice_bounds(index: int, slices: int) -> tuple[float, float]:
    """The phase range [low, high) of slice `index` of `slices`. Adjacent slices share
    the same float for their common bound, so no phase falls between two slices."""
    return index / slices, (index + 1) / slices


def slice_of(phase: float, slices: int) -> int:
    """The slice whose bounds (as computed by `slice_bounds`) contain `phase`."""
    index = min(int(phase * slices), slices - 1)
    while index > 0 and phase < index / slices:
        index -= 1
    while index < slices - 1 and phase >= (index + 1) / slices:
        index += 1
    return index


class SliceKey(NamedTuple):
    """One slice of one period; keys sort in time order."""

    period: int
    index: int


@dataclass(frozen=True)
class Grid:
    start: dt.datetime
    first: int
    period: dt.timedelta
    slices: int
    zone: str = localtime.UTC_NAME

    @property
    def zoned(self) -> bool:
        return self.zone != localtime.UTC_NAME

    @cached_property
    def _first_day(self) -> dt.date:
        return localtime.local_date(self.start, self.zone)

    def _day(self, k: int) -> dt.date:
        return self._first_day + (k - self.first) * self.period.days * localtime.DAY

    def regimes(self, k: int) -> tuple[localtime.Regime, ...]:
        """Period k's wall-time regimes (a zoned grid only), as the planner's SQL gets them."""
        return localtime.regimes(self.zone, self._day(k), self.period.days)

    def _at_wall(self, k: int, offset: dt.timedelta) -> dt.datetime:
        return localtime.wall_instant(self.regimes(k), offset // MICROSECOND)

    def period_start(self, k: int) -> dt.datetime:
        if self.zoned:
            return self._at_wall(k, dt.timedelta(0))
        return self.start + (k - self.first) * self.period

    def period_at(self, when: dt.datetime) -> int:
        """The period that contains `when` (below `first` before the grid starts)."""
        if not self.zoned:
            return self.first + (when - self.start) // self.period
        days = (localtime.local_date(when, self.zone) - self._first_day).days
        k = self.first + days // self.period.days
        while self.period_start(k + 1) <= when:  # a midnight the clocks fell back across
            k += 1
        while self.period_start(k) > when:
            k -= 1
        return k

    def occurrence(self, k: int, phase: float) -> dt.datetime:
        if self.zoned:
            return self._at_wall(k, phase_offset(phase, self.period))
        return self.period_start(k) + phase_offset(phase, self.period)

    def slice_window(self, k: int, index: int) -> tuple[dt.datetime, dt.datetime]:
        low, high = slice_bounds(index, self.slices)
        if self.zoned:
            return self.occurrence(k, low), self.occurrence(k, high)
        base = self.period_start(k)
        return base + phase_offset(low, self.period), base + phase_offset(high, self.period)

    def slice_at(self, k: int, when: dt.datetime) -> int | None:
        """The slice of period k whose window holds `when` (None outside the period)."""
        start, end = self.period_start(k), self.period_start(k + 1)
        if not start <= when < end:
            return None
        if not self.zoned:
            return slice_of((when - start) / self.period, self.slices)
        low, high = 0, self.slices - 1  # the first slice whose window ends after `when`
        while low < high:
            mid = (low + high) // 2
            if self.slice_window(k, mid)[1] > when:
                high = mid
            else:
                low = mid + 1
        return low

    def phase_at(self, k: int, when: dt.datetime) -> float:
        """The phase whose time in period k is `when`: the elapsed share of the period, of
        its wall-clock length on a zoned grid."""
        if not self.zoned:
            return (when - self.period_start(k)) / self.period
        wall_us = localtime.wall_us_of(when, self._day(k), self.zone)
        return wall_us / (self.period // MICROSECOND)

    def shortest_period(self) -> dt.timedelta:
        """The least time between two occurrences of a member: a zoned period loses at
        most `localtime.MAX_SHIFT` to a DST change."""
        return self.period - localtime.MAX_SHIFT if self.zoned else self.period


@dataclass(frozen=True)
class Schedule:
    current: Grid
    pending: Grid | None = None

    def grid_for(self, k: int) -> Grid:
        if self.pending is not None and k >= self.pending.first:
            return self.pending
        return self.current

    def grid_at(self, when: dt.datetime) -> Grid:
        if self.pending is not None and when >= self.pending.start:
            return self.pending
        return self.current

    @property
    def latest(self) -> Grid:
        return self.pending or self.current

    def occurrence(self, k: int, phase: float) -> dt.datetime:
        return self.grid_for(k).occurrence(k, phase)

    def window(self, key: SliceKey) -> tuple[dt.datetime, dt.datetime]:
        return self.grid_for(key.period).slice_window(key.period, key.index)

    def next_slice(self, key: SliceKey) -> SliceKey:
        if key.index + 1 < self.grid_for(key.period).slices:
            return SliceKey(key.period, key.index + 1)
        return SliceKey(key.period + 1, 0)

    def first_slice_ending_after(self, when: dt.datetime) -> SliceKey:
        """The earliest slice (not before the first period) whose window ends after `when`."""
        grid = self.grid_at(when)
        key = SliceKey(max(grid.period_at(when), self.current.first), 0)
        while self.window(key)[1] <= when:
            key = self.next_slice(key)
        return key

    def slices_to_plan(
        self, *, last: SliceKey | None, not_before: dt.datetime, until: dt.datetime
    ) -> Iterator[SliceKey]:
        """In time order: the slices after `last` (the last one planned) that end after
        `not_before` and start before `until`. Older ones are skipped: their time is gone."""
        key = self.first_slice_ending_after(not_before)
        if last is not None:
            key = max(key, self.next_slice(last))
        while self.window(key)[0] < until:
            yield key
            key = self.next_slice(key)

    def next_runs(self, phase: float, *, after: dt.datetime, count: int) -> list[dt.datetime]:
        """The next `count` occurrence times at or after `after` for a member with `phase`."""
        k = max(self.grid_at(after).period_at(after) - 1, self.current.first)
        runs: list[dt.datetime] = []
        while len(runs) < count:
            when = self.occurrence(k, phase)
            if when >= after:
                runs.append(when)
            k += 1
        return runs

    def change_period(self, *, last: SliceKey | None, now: dt.datetime) -> int:
        """The first period a change can apply to: it has not begun by `now` and none of
        its slices is planned. Every member then runs once in the period before it (old
        grid) and once in it (new grid): nothing runs twice, nothing is skipped."""
        k = max(self.grid_at(now).period_at(now) + 1, self.current.first)
        if last is not None:
            k = max(k, last.period + 1)
        return k

    def settled(self, *, last: SliceKey | None, now: dt.datetime) -> Schedule:
        """This schedule without a pending change: the change becomes the current grid
        once it took effect (its first period began or has a planned slice), and is
        dropped if it did not."""
        pending = self.pending
        if pending is None:
            return self
        if pending.start <= now or (last is not None and last.period >= pending.first):
            return Schedule(pending)
        return Schedule(self.current)

    def changed(self, *, at: int, period: dt.timedelta, slices: int) -> Schedule:
        """This (settled) schedule with `period` and `slices` from period `at` on."""
        if self.pending is not None:
            raise ValueError("settle the pending change first")
        if at <= self.current.first:
            return Schedule(replace(self.current, period=period, slices=slices))
        start = self.current.period_start(at)
        pending = replace(self.current, start=start, first=at, period=period, slices=slices)
        return Schedule(self.current, pending)
