"""When a schedule fires: cron in a real time zone, or a fixed interval (pure).

The planner, the dashboard and `schedule_fire_times` all read fire times from here.

- Cron expressions have 5 fields (minute hour day-of-month month day-of-week) or 6, the
  first one then being the seconds (`"15 30 2 * * *"`: 02:30:15). They are matched
  against the *wall time* of the schedule's zone (croniter on naive local times), and
  each matching wall time becomes one instant (`wall_instant`):
  - a wall time that does not exist (clocks spring forward over it) fires once, at the
    first valid instant after it: the moment the clocks jump. Several such wall times
    (`*/15` in the skipped hour) and a match at the jump itself give one fire;
  - a wall time that occurs twice (clocks fall back) fires once, at its first occurrence.
- `every=` is elapsed time: fires at `first + k × every` in UTC, whatever the clocks do.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterError, croniter

ERR_CRON_TYPE = "cron must be a string such as '30 2 * * *'."
ERR_CRON_FIELDS = (
    "cron must have 5 fields (minute hour day-of-month month day-of-week) or 6 with the"
    " seconds first; got {count}."
)
ERR_CRON_INVALID = "cron {cron!r} is not valid: {reason}"
ERR_ZONE = "timezone must be an IANA zone name such as 'Europe/Berlin' (got {zone!r})."

UTC = dt.UTC
_SECOND = dt.timedelta(seconds=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
# No schedule fires later: past it, some zones' wall clocks would be beyond year 9999.
LAST_FIRE = dt.datetime.max.replace(tzinfo=UTC) - dt.timedelta(days=1)
# The zones accepted: IANA names the system's database knows (read once).
_ZONES: frozenset[str] | None = None


class FireRuleError(ValueError):
    """A cron expression or time zone is invalid; the message says what to fix."""


def validated_cron(cron: object) -> str:
    """The expression, stripped, once croniter accepts it with 5 or 6 fields."""
    if not isinstance(cron, str):
        raise FireRuleError(ERR_CRON_TYPE)
    text = " ".join(cron.split())
    count = len(text.split(" ")) if text else 0
    if count not in (5, 6):
        raise FireRuleError(ERR_CRON_FIELDS.format(count=count))
    try:
        # a date that never comes (30 February) raises here, not in the planner
        croniter(text, dt.datetime(2000, 1, 1), second_at_beginning=True).get_next(dt.datetime)
    except (CroniterError, ValueError, KeyError) as exc:
        raise FireRuleError(ERR_CRON_INVALID.format(cron=text, reason=exc)) from exc
    return text


def validated_zone(name: object) -> ZoneInfo:
    global _ZONES
    if _ZONES is None:
        _ZONES = frozenset(available_timezones()) | {"UTC"}
    if not isinstance(name, str) or name not in _ZONES:
        raise FireRuleError(ERR_ZONE.format(zone=name))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise FireRuleError(ERR_ZONE.format(zone=name)) from exc


def wall_instant(wall: dt.datetime, zone: ZoneInfo) -> dt.datetime:
    """The instant (UTC) a naive wall time of `zone` fires at: its first occurrence, or,
    if the clocks skip it, the first valid instant after it (the jump itself)."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first  # exists (fold=0 is its first occurrence when it occurs twice)
    # In a gap: fold=1 reads it with the offset after the jump, an instant before it;
    # fold=0 with the offset before, one after it. The jump lies between: the first
    # whole second whose wall time is past `wall` (zone offsets change on whole seconds).
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = first
    while high - low > _SECOND:
        middle = low + ((high - low) // 2 // _SECOND) * _SECOND
        if middle.astimezone(zone).replace(tzinfo=None) > wall:
            high = middle
        else:
            low = middle
    return high


@dataclass(frozen=True)
class FireRule:
    """What decides a schedule's fire times: a cron in a zone, or an interval from its
    first fire; fires before `start_at` or after `end_at` (both inclusive) are not."""

    cron: str
    every: dt.timedelta | None
    zone: ZoneInfo
    first: dt.datetime  # the interval's first fire (unused by cron)
    start_at: dt.datetime | None = None
    end_at: dt.datetime | None = None

    def fires(self, *, after: dt.datetime, until: dt.datetime) -> Iterator[dt.datetime]:
        """Fire times t, after < t <= until, ascending, in UTC."""
        if self.start_at is not None and self.start_at > after:
            after = self.start_at - dt.timedelta(microseconds=1)
        until = min(until, self.end_at or LAST_FIRE, LAST_FIRE)
        if until <= after:
            return
        source = self._interval(after) if self.every is not None else self._cron(after)
        for fire in source:
            if fire > until:
                return
            yield fire

    def _interval(self, after: dt.datetime) -> Iterator[dt.datetime]:
        step = self.every
        k = 0 if after < self.first else (after - self.first) // step + 1
        while True:
            try:
                fire = self.first + k * step
            except OverflowError:
                return  # past year 9999: no later fire
            yield fire
            k += 1

    def _cron(self, after: dt.datetime) -> Iterator[dt.datetime]:
        wall = after.astimezone(self.zone).replace(tzinfo=None)
        walls = copy.copy(_parsed(self.cron))  # parsing costs ten times a match
        walls.set_current(wall, force=True)
        last = after
        while True:
            try:
                fire = wall_instant(walls.get_next(dt.datetime), self.zone)
            except (OverflowError, ValueError):  # croniter: "year 10000 is out of range"
                return
            # A wall time in the second pass of a repeated hour maps to its first
            # occurrence, already past; a skipped hour's wall times map to one instant.
            if fire > last:
                last = fire
                yield fire


@functools.lru_cache(maxsize=4096)
def _parsed(cron: str) -> croniter:
    """The expression parsed once per process: each use iterates a shallow copy."""
    return croniter(cron, dt.datetime(2000, 1, 1), second_at_beginning=True)


def fires_between(
    rule: FireRule, *, after: dt.datetime, until: dt.datetime, limit: int
) -> list[dt.datetime]:
    """At most `limit` fire times of `rule` in (after, until]."""
    found: list[dt.datetime] = []
    for fire in rule.fires(after=after, until=until):
        found.append(fire)
        if len(found) >= limit:
            break
    return found


def jitter_offset(*, schedule_id: int, fire: dt.datetime, jitter: dt.timedelta) -> dt.timedelta:
    """A delay in [0, jitter) of a fire's run, the same wherever it is computed (so
    racing planners agree), to the microsecond."""
    if jitter <= dt.timedelta(0):
        return dt.timedelta(0)
    digest = hashlib.sha256(f"{schedule_id}:{fire_key(fire)}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return dt.timedelta(microseconds=int(jitter / dt.timedelta(microseconds=1) * fraction))


def fire_key(fire: dt.datetime) -> str:
    """A fire time as it appears in keys: UTC, ISO 8601, microseconds when there are any."""
    return fire.astimezone(UTC).isoformat()
