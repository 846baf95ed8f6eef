"""Local calendar days: wall-clock times of a time zone mapped to instants (pure).

A period of a task with a time zone starts at local midnight and lasts whole local days,
so it lasts 23 or 25 hours across a DST change. A member's place in it is a wall-clock
offset from that midnight (its phase times the period's wall length). Wall times are
mapped to instants by one rule: a wall time runs at the first instant whose local time is
not before it. So a time that exists runs then (the first of two, when the clocks fall
back), and one the clocks skip runs at the jump.

Between two offset changes the map is the wall time less the offset. A period is cut
into such *regimes* at each change `t` (offset a before it, b after): a regime starts at
the wall time t + a (the instant of the change, read in the offset before it) and maps
wall time w to max(w − b, t). When the clocks go forward the walls [t + a, t + b) do not
exist and run at t; when they fall back the walls [t + b, t + a) stay in the earlier
regime: the first occurrence. The planner's SQL gets the same regimes (bounds, bases,
floors) and picks one per member with width_bucket, so Python and SQL agree to the
microsecond.
"""

from __future__ import annotations

import datetime as dt
import math
import zoneinfo
from dataclasses import dataclass
from functools import cache, lru_cache

UTC_NAME = "UTC"
DAY = dt.timedelta(days=1)
MICROSECOND = dt.timedelta(microseconds=1)
# Offsets are sampled this far apart to find their changes (each then found to the
# second): two changes closer than this that cancel out would be missed; tzdata has none.
_SAMPLE = dt.timedelta(hours=6)
# Walls are searched this far either side: more than any UTC offset.
_MARGIN = dt.timedelta(days=2)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# The most a DST change moves the clocks (Antarctica/Troll: 2 h; most zones 1 h).
MAX_SHIFT = dt.timedelta(hours=2)


@cache
def zone_names() -> frozenset[str]:
    """The IANA names this machine's time zone data knows."""
    return frozenset(zoneinfo.available_timezones())


@cache
def zone(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


@dataclass(frozen=True)
class Regime:
    """Walls from `wall_us` (µs after the period's local midnight) on run at
    max(base + wall, floor) until the next regime."""

    wall_us: int
    base: dt.datetime
    floor: dt.datetime | None

    def instant(self, wall_us: int) -> dt.datetime:
        at = self.base + dt.timedelta(microseconds=wall_us)
        return at if self.floor is None else max(at, self.floor)


def _offset(tz: zoneinfo.ZoneInfo, second: int) -> dt.timedelta:
    return dt.datetime.fromtimestamp(second, tz).utcoffset() or dt.timedelta(0)


def transitions(
    tz: zoneinfo.ZoneInfo, start: dt.datetime, end: dt.datetime
) -> list[tuple[dt.datetime, dt.timedelta, dt.timedelta]]:
    """The offset changes in (start, end]: (instant, offset before, offset after).
    Changes happen at whole seconds (tzdata's transitions are in seconds)."""
    step = int(_SAMPLE.total_seconds())
    low = math.floor((start - _EPOCH).total_seconds())
    stop = math.ceil((end - _EPOCH).total_seconds())
    found = []
    before = _offset(tz, low)
    while low < stop:
        high = min(low + step, stop)
        after = _offset(tz, high)
        if after == before:
            low = high
            continue
        while high - low > 1:  # the offset is `before` at low and not at high
            mid = (low + high) // 2
            if _offset(tz, mid) == before:
                low = mid
            else:
                high = mid
        after = _offset(tz, high)
        found.append((_EPOCH + dt.timedelta(seconds=high), before, after))
        low, before = high, after
    return found


@lru_cache(maxsize=1024)
def regimes(zone_name: str, day: dt.date, days: int) -> tuple[Regime, ...]:
    """The regimes of the walls from `day` 00:00 to `days` days later (both included),
    first to last; the first one holds the period's midnight."""
    tz = zone(zone_name)
    midnight = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)  # the wall, read as UTC
    end = midnight + days * DAY
    changes = transitions(tz, midnight - _MARGIN, end + _MARGIN)
    seconds = int((midnight - _EPOCH).total_seconds())
    first_offset = changes[0][1] if changes else _offset(tz, seconds)
    all_regimes = [Regime(-1, midnight - first_offset, None)]
    for instant, before, after in changes:
        wall_us = (instant + before - midnight) // MICROSECOND
        all_regimes.append(Regime(wall_us, midnight - after, instant))
    span_us = days * DAY // MICROSECOND
    kept = [
        regime
        for regime, following in zip(all_regimes, [*all_regimes[1:], None], strict=True)
        if regime.wall_us <= span_us and (following is None or following.wall_us > 0)
    ]
    return (Regime(-1, kept[0].base, kept[0].floor), *kept[1:])


def wall_instant(periods: tuple[Regime, ...], wall_us: int) -> dt.datetime:
    """The instant of the wall time `wall_us` µs after the regimes' midnight."""
    chosen = periods[0]
    for regime in periods[1:]:
        if regime.wall_us > wall_us:
            break
        chosen = regime
    return chosen.instant(wall_us)


def local_date(when: dt.datetime, zone_name: str) -> dt.date:
    return when.astimezone(zone(zone_name)).date()


def local_midnight(day: dt.date, zone_name: str) -> dt.datetime:
    """The first instant of `day` in the zone (the jump, if its midnight is skipped)."""
    return wall_instant(regimes(zone_name, day, 1), 0)


def wall_us_of(when: dt.datetime, day: dt.date, zone_name: str) -> int:
    """The wall time of `when` in the zone, in µs after `day` 00:00 (negative before it)."""
    local = when.astimezone(zone(zone_name)).replace(tzinfo=None)
    return (local - dt.datetime.combine(day, dt.time())) // MICROSECOND
