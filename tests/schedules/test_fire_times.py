"""Fire times, pure: cron in real zones across both DST changes, intervals as elapsed
time, the rules' validation."""

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from tasksapp.schedules.fire_times import (
    ERR_CRON_FIELDS,
    ERR_ZONE,
    FireRule,
    FireRuleError,
    fires_between,
    jitter_offset,
    validated_cron,
    validated_zone,
    wall_instant,
)

BERLIN, NEW_YORK = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")
UTC = dt.UTC


def utc(*args):
    return dt.datetime(*args, tzinfo=UTC)


def cron(expr, zone):
    return FireRule(cron=expr, every=None, zone=zone, first=utc(2000, 1, 1))


def fires(rule, after, until):
    return list(rule.fires(after=after, until=until))


def local(fire, zone):
    return fire.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S%z")


# --- spring forward: the wall time does not exist, fires once at the jump -------------


def test_berlin_spring_forward_fires_a_skipped_time_once_at_the_jump():
    # 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC); 02:30 does not exist.
    found = fires(cron("30 2 * * *", BERLIN), utc(2026, 3, 27), utc(2026, 3, 31))
    assert found == [
        utc(2026, 3, 27, 1, 30),
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 29, 1),
        utc(2026, 3, 30, 0, 30),
    ]
    assert local(found[2], BERLIN) == "2026-03-29 03:00:00+0200"


def test_new_york_spring_forward_fires_a_skipped_time_once_at_the_jump():
    # 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC).
    found = fires(cron("30 2 * * *", NEW_YORK), utc(2026, 3, 7, 12), utc(2026, 3, 9, 12))
    assert found == [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)]
    assert local(found[0], NEW_YORK) == "2026-03-08 03:00:00-0400"


def test_every_skipped_time_and_the_jump_itself_give_one_fire():
    # */15 matches 02:00, 02:15, 02:30, 02:45 (all skipped) and 03:00 (the jump): one fire.
    found = fires(cron("*/15 * * * *", BERLIN), utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 31))
    assert [local(f, BERLIN)[11:19] for f in found] == [
        "01:45:00",
        "03:00:00",
        "03:15:00",
        "03:30:00",
    ]


def test_a_later_pass_does_not_fire_the_jump_again():
    rule = cron("*/15 * * * *", BERLIN)
    first = fires(rule, utc(2026, 3, 29, 0, 50), utc(2026, 3, 29, 1))
    assert first == [utc(2026, 3, 29, 1)]
    assert fires(rule, utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 20)) == [utc(2026, 3, 29, 1, 15)]


# --- fall back: the wall time occurs twice, fires once at its first occurrence ---------


def test_berlin_fall_back_fires_a_repeated_time_once_at_its_first_occurrence():
    # 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:30 happens at 00:30 and 01:30 UTC.
    found = fires(cron("30 2 * * *", BERLIN), utc(2026, 10, 24), utc(2026, 10, 27))
    assert found == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    assert local(found[1], BERLIN) == "2026-10-25 02:30:00+0200"


def test_new_york_fall_back_fires_a_repeated_time_once_at_its_first_occurrence():
    # 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00 UTC); 01:30 happens at 05:30 and 06:30 UTC.
    found = fires(cron("30 1 * * *", NEW_YORK), utc(2026, 10, 31, 12), utc(2026, 11, 2, 12))
    assert found == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


def test_the_repeated_hour_fires_each_time_once():
    found = fires(cron("0,30 * * * *", NEW_YORK), utc(2026, 11, 1, 4, 45), utc(2026, 11, 1, 7, 5))
    # 01:00 EDT, 01:30 EDT, (01:00 and 01:30 EST not again), 02:00 EST
    assert [local(f, NEW_YORK) for f in found] == [
        "2026-11-01 01:00:00-0400",
        "2026-11-01 01:30:00-0400",
        "2026-11-01 02:00:00-0500",
    ]


def test_a_pass_starting_inside_the_repeated_hour_does_not_fire_its_times_again():
    rule = cron("*/20 * * * *", BERLIN)
    # 01:10 UTC is 02:10 CET, the second 02:10; 02:20 and 02:40 fired at 00:20 and 00:40 UTC.
    assert fires(rule, utc(2026, 10, 25, 1, 10), utc(2026, 10, 25, 2, 1)) == [utc(2026, 10, 25, 2)]


def test_wall_instant_of_a_skipped_time_is_the_jump():
    assert wall_instant(dt.datetime(2026, 3, 29, 2, 30), BERLIN) == utc(2026, 3, 29, 1)
    assert wall_instant(dt.datetime(2026, 3, 29, 2, 0), BERLIN) == utc(2026, 3, 29, 1)
    assert wall_instant(dt.datetime(2026, 10, 25, 2, 30), BERLIN) == utc(2026, 10, 25, 0, 30)


# --- seconds, bounds -------------------------------------------------------------------


def test_six_fields_read_the_seconds_first():
    found = fires(
        cron("15 30 2 * * *", UTC_ZONE := ZoneInfo("UTC")), utc(2026, 1, 1), utc(2026, 1, 2, 12)
    )
    assert found == [utc(2026, 1, 1, 2, 30, 15), utc(2026, 1, 2, 2, 30, 15)]
    assert UTC_ZONE.key == "UTC"


def test_start_and_end_bound_the_fires_inclusively():
    rule = FireRule(
        cron="0 * * * *",
        every=None,
        zone=ZoneInfo("UTC"),
        first=utc(2000, 1, 1),
        start_at=utc(2026, 1, 1, 3),
        end_at=utc(2026, 1, 1, 5),
    )
    assert fires(rule, utc(2026, 1, 1), utc(2026, 1, 2)) == [utc(2026, 1, 1, h) for h in (3, 4, 5)]


@pytest.mark.parametrize("every", [None, dt.timedelta(days=366)])
def test_no_fire_is_past_year_9999_in_any_zone(every):
    rule = FireRule(
        cron="" if every else "0 0 1 1 *",
        every=every,
        zone=ZoneInfo("Pacific/Kiritimati"),
        first=utc(9990, 1, 1),
    )
    end = dt.datetime.max.replace(tzinfo=UTC)
    found = fires(rule, utc(9990, 1, 2), end)
    assert found and found[-1] < end - dt.timedelta(days=1)
    assert [f.astimezone(rule.zone).year for f in found][-1] == 9999


# --- intervals: elapsed time, never wall time -----------------------------------------


@pytest.mark.parametrize(
    ("zone", "day"),
    [
        (BERLIN, utc(2026, 3, 29)),
        (BERLIN, utc(2026, 10, 25)),
        (NEW_YORK, utc(2026, 3, 8)),
        (NEW_YORK, utc(2026, 11, 1)),
    ],
)
def test_intervals_are_elapsed_time_across_dst(zone, day):
    first = day - dt.timedelta(hours=3)
    rule = FireRule(cron="", every=dt.timedelta(minutes=45), zone=zone, first=first)
    found = fires(rule, first - dt.timedelta(seconds=1), day + dt.timedelta(hours=12))
    gaps = {b - a for a, b in zip(found, found[1:], strict=False)}
    assert found[0] == first and gaps == {dt.timedelta(minutes=45)}
    # while the wall-clock gaps around the change are not all 45 minutes
    walls = [f.astimezone(zone).replace(tzinfo=None) for f in found]
    assert {b - a for a, b in zip(walls, walls[1:], strict=False)} != {dt.timedelta(minutes=45)}


def test_interval_fires_resume_on_the_grid_after_any_point():
    rule = FireRule(cron="", every=dt.timedelta(seconds=90), zone=BERLIN, first=utc(2026, 1, 1))
    assert fires_between(rule, after=utc(2026, 1, 1, 0, 2), until=utc(2026, 1, 2), limit=2) == [
        utc(2026, 1, 1, 0, 3),
        utc(2026, 1, 1, 0, 4, 30),
    ]


# --- validation, jitter ----------------------------------------------------------------


@pytest.mark.parametrize("expr", ["* * * *", "0 0 * * * * *", ""])
def test_cron_needs_five_or_six_fields(expr):
    with pytest.raises(FireRuleError) as exc:
        validated_cron(expr)
    assert str(exc.value) == ERR_CRON_FIELDS.format(count=len(expr.split()))


@pytest.mark.parametrize("expr", ["61 * * * *", "* 25 * * *", "0 0 30 2 *", "x * * * *"])
def test_bad_cron_is_refused(expr):
    with pytest.raises(FireRuleError, match="is not valid"):
        validated_cron(expr)


def test_unknown_zone_is_refused():
    with pytest.raises(FireRuleError) as exc:
        validated_zone("Europe/Atlantis")
    assert str(exc.value) == ERR_ZONE.format(zone="Europe/Atlantis")
    assert validated_zone("America/New_York") == NEW_YORK


def test_jitter_is_deterministic_and_within_bounds():
    jitter = dt.timedelta(seconds=30)
    offsets = [
        jitter_offset(schedule_id=7, fire=utc(2026, 1, 1, 0, m), jitter=jitter) for m in range(60)
    ]
    assert all(dt.timedelta(0) <= o < jitter for o in offsets)
    assert len(set(offsets)) > 50
    assert offsets[3] == jitter_offset(schedule_id=7, fire=utc(2026, 1, 1, 0, 3), jitter=jitter)
    assert jitter_offset(
        schedule_id=7, fire=utc(2026, 1, 1), jitter=dt.timedelta(0)
    ) == dt.timedelta(0)
