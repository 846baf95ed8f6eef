"""Recurring tasks that follow a time zone's calendar days: 23- and 25-hour days at the
DST changes of Europe/Berlin and America/New_York, each member once per local day at its
own local time, a skipped time at the jump, a doubled one at its first occurrence. Pure
grid arithmetic first, then planning against the real database."""

import datetime as dt
import math
import zoneinfo

import pytest
import time_machine
from hypothesis import given, settings
from hypothesis import strategies as st

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.store import PostgresJobStore, SqliteJobStore
from tasksapp.recurring import localtime
from tasksapp.recurring.models import Member, RecurringTask, SlicePlan
from tasksapp.recurring.schedule import Grid, Schedule, phase_offset, slice_bounds, slice_of
from tasksapp.recurring.selectors.plans import recurring_task_plan
from tasksapp.recurring.selectors.schedules import member_next_runs, recurring_task_schedule
from tasksapp.recurring.services import (
    PlanningInputError,
    member_activate,
    member_create_many,
    member_deactivate,
    plan_due_slices,
    recurring_task_create,
    recurring_task_update,
)
from tasksapp.recurring.services import members as member_svc
from tasksapp.recurring.services import recurring_tasks as task_svc
from tasksapp.recurring.services import slices as slice_svc
from tasksapp.recurring.store import PostgresRecurringStore, SqliteRecurringStore

HANDLER = "tests.handlers.recording.record"
UTC = dt.UTC
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
DAY_US = DAY // dt.timedelta(microseconds=1)
BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"

# The 2026 changes: (zone, local date, hours that day lasts).
SPRING = [(BERLIN, dt.date(2026, 3, 29)), (NEW_YORK, dt.date(2026, 3, 8))]
AUTUMN = [(BERLIN, dt.date(2026, 10, 25)), (NEW_YORK, dt.date(2026, 11, 1))]
CHANGES = [(*c, 23) for c in SPRING] + [(*c, 25) for c in AUTUMN]
CHANGE_IDS = [f"{zone}-{day}" for zone, day, _ in CHANGES]


def utc(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def local(when: dt.datetime, zone: str) -> dt.datetime:
    return when.astimezone(zoneinfo.ZoneInfo(zone))


def daily(zone: str, first_day: dt.date, slices: int = 24) -> Grid:
    start = localtime.local_midnight(first_day, zone)
    return Grid(start, 0, DAY, slices, zone)


def phase_at(wall: dt.time) -> float:
    """The least phase whose wall-clock offset in a day is exactly `wall`."""
    target = (wall.hour * 3600 + wall.minute * 60 + wall.second) * 1_000_000
    phase = target / DAY_US
    while math.floor(phase * DAY_US) < target:
        phase = math.nextafter(phase, 1.0)
    while phase > 0 and math.floor(math.nextafter(phase, 0.0) * DAY_US) >= target:
        phase = math.nextafter(phase, 0.0)
    assert math.floor(phase * DAY_US) == target
    return phase


# --- the grid, pure ----------------------------------------------------------------------


@pytest.mark.parametrize(("zone", "day", "hours"), CHANGES, ids=CHANGE_IDS)
def test_a_local_day_lasts_23_or_25_hours_at_a_dst_change(zone, day, hours):
    grid = daily(zone, day - DAY)
    assert grid.period_start(2) - grid.period_start(1) == hours * HOUR
    assert grid.period_start(1) - grid.period_start(0) == 24 * HOUR
    assert grid.period_start(3) - grid.period_start(2) == 24 * HOUR
    for k in range(4):  # every period starts at local midnight
        start = local(grid.period_start(k), zone)
        assert (start.date(), start.time()) == (day + (k - 1) * DAY, dt.time(0))


@pytest.mark.parametrize(
    ("zone", "day", "wall", "expected"),
    [
        (BERLIN, dt.date(2026, 3, 29), dt.time(2, 30), utc(2026, 3, 29, 1)),
        (NEW_YORK, dt.date(2026, 3, 8), dt.time(2, 30), utc(2026, 3, 8, 7)),
        (BERLIN, dt.date(2026, 3, 29), dt.time(2, 0), utc(2026, 3, 29, 1)),
    ],
)
def test_a_skipped_wall_time_runs_at_the_jump(zone, day, wall, expected):
    grid = daily(zone, day)
    assert grid.occurrence(0, phase_at(wall)) == expected
    assert local(expected, zone).time() == dt.time(3)  # the first valid instant after it


@pytest.mark.parametrize(
    ("zone", "day", "wall", "expected"),
    [
        (BERLIN, dt.date(2026, 10, 25), dt.time(2, 30), utc(2026, 10, 25, 0, 30)),  # CEST
        (NEW_YORK, dt.date(2026, 11, 1), dt.time(1, 30), utc(2026, 11, 1, 5, 30)),  # EDT
    ],
)
def test_a_doubled_wall_time_runs_at_its_first_occurrence(zone, day, wall, expected):
    when = daily(zone, day).occurrence(0, phase_at(wall))
    assert when == expected
    assert local(when, zone).fold == 0 and local(when, zone).time() == wall
    assert local(when + HOUR, zone).time() == wall  # the second occurrence: not taken


ZONES = [BERLIN, NEW_YORK, "Australia/Sydney", "Australia/Lord_Howe", "America/Santiago"]
days = st.dates(min_value=dt.date(2020, 1, 1), max_value=dt.date(2031, 12, 31))
walls = st.integers(min_value=0, max_value=DAY_US - 1)


@settings(max_examples=300, deadline=None)
@given(zone=st.sampled_from(ZONES), day=days, wall_us=walls)
def test_a_wall_time_runs_at_the_first_instant_not_before_it(zone, day, wall_us):
    """Any wall time of any day: it runs then (the first of two) if it exists, else at
    the jump: the instant whose local time passes it."""
    tz = zoneinfo.ZoneInfo(zone)
    wall = dt.datetime.combine(day, dt.time()) + dt.timedelta(microseconds=wall_us)
    when = localtime.wall_instant(localtime.regimes(zone, day, 1), wall_us)
    first = wall.replace(tzinfo=tz, fold=0)
    exists = first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
    if exists:
        assert when == first.astimezone(UTC)
    else:
        before = (when - dt.timedelta(microseconds=1)).astimezone(tz).replace(tzinfo=None)
        assert before < wall < when.astimezone(tz).replace(tzinfo=None)


@settings(max_examples=200, deadline=None)
@given(zone=st.sampled_from([BERLIN, NEW_YORK]), phase=st.floats(0.0, 1.0, exclude_max=True))
def test_a_member_keeps_its_local_time_every_day_of_the_year(zone, phase):
    grid = daily(zone, dt.date(2026, 1, 1))
    wall = (dt.datetime.min + phase_offset(phase, DAY)).time()
    skipped = {}
    for k in range(365):
        when = local(grid.occurrence(k, phase), zone)
        assert grid.period_at(when) == k
        if when.date() == dt.date(2026, 1, 1) + k * DAY and when.time() == wall:
            continue
        skipped[when.date()] = when.time()  # only a time the clocks skip moves (to 03:00)
    assert all(t == dt.time(3) for t in skipped.values())
    assert set(skipped) <= {d for z, d in SPRING if z == zone}


@settings(max_examples=100, deadline=None)
@given(
    change=st.sampled_from(SPRING + AUTUMN),
    slices=st.sampled_from([1, 2, 3, 24, 48, 96, 1440]),
    phase=st.floats(0.0, 1.0, exclude_max=True),
)
def test_slices_tile_the_local_day_and_hold_their_members(change, slices, phase):
    """Slice windows follow each other without gap or overlap from midnight to midnight
    (one may be empty: the hour the clocks skip); a member's time lies in its slice's."""
    zone, day = change
    grid = daily(zone, day, slices)
    ends = [grid.period_start(0)]
    for index in range(slices):
        start, end = grid.slice_window(0, index)
        assert start == ends[-1] and end >= start
        ends.append(end)
    assert ends[-1] == grid.period_start(1)
    index = slice_of(phase, slices)
    start, end = grid.slice_window(0, index)
    assert start <= grid.occurrence(0, phase) <= end
    low, high = slice_bounds(index, slices)
    assert low <= phase < high


def test_the_slice_of_the_skipped_hour_is_empty_and_of_the_doubled_hour_two_hours_long():
    spring, autumn = daily(BERLIN, dt.date(2026, 3, 29)), daily(BERLIN, dt.date(2026, 10, 25))
    assert spring.slice_window(0, 2) == (utc(2026, 3, 29, 1), utc(2026, 3, 29, 1))
    assert autumn.slice_window(0, 2) == (utc(2026, 10, 25, 0), utc(2026, 10, 25, 2))
    assert autumn.slice_at(0, utc(2026, 10, 25, 1, 30)) == 2
    assert spring.slice_at(0, utc(2026, 3, 29, 1)) == 3  # the empty one holds no instant


def test_a_utc_grid_is_the_fixed_length_grid():
    grid = Grid(utc(2026, 3, 28, 7), 0, DAY, 4)
    assert not grid.zoned and grid.shortest_period() == DAY
    assert [grid.period_start(k) for k in range(3)] == [utc(2026, 3, 28 + k, 7) for k in range(3)]
    assert grid.occurrence(1, 0.5) == utc(2026, 3, 29, 19)


def test_a_change_of_period_on_a_zoned_grid_starts_at_a_local_midnight():
    schedule = Schedule(daily(BERLIN, dt.date(2026, 3, 20)))
    changed = schedule.changed(at=10, period=2 * DAY, slices=2)
    pending = changed.pending
    assert pending.zone == BERLIN and pending.first == 10
    assert local(pending.start, BERLIN).replace(tzinfo=None) == dt.datetime(2026, 3, 30)
    assert pending.period_start(11) - pending.period_start(10) == 48 * HOUR


# --- planning against the database -------------------------------------------------------

pytest_db = pytest.mark.django_db


@pytest.fixture
def planning(settings):
    settings.TEMPO_PLANNING = {
        "PHASE_STRATEGY": "golden",
        "HORIZON_SECONDS": 26 * 3600.0,
        "LATE_GRACE_SECONDS": 900.0,
    }


def zoned_task(zone: str, first_day: dt.date, **fields) -> RecurringTask:
    epoch = localtime.local_midnight(first_day, zone) + 5 * HOUR  # any time of the day
    defaults = dict(name="sync", handler=HANDLER, period=DAY, slices=24, timezone=zone)
    return recurring_task_create(epoch=epoch, **{**defaults, **fields})


def member_at(wall: dt.time, name: str) -> Member:
    """A member whose place is `wall` (created as the services do, phase set by hand)."""
    [member] = member_create_many(external_ids=[name])
    Member.objects.filter(pk=member.pk).update(phase=phase_at(wall))
    member.refresh_from_db()
    return member


def plan_days(task: RecurringTask, first: dt.datetime, days: int) -> None:
    """The planner's daily runs, each at 23:00 UTC (its horizon reaches a day ahead)."""
    for n in range(days):
        plan_due_slices(now=first + n * DAY)


def runs(member: Member) -> list[dt.datetime]:
    return sorted(Job.objects.filter(payload__member_id=member.id).values_list("run_at", flat=True))


@pytest_db
@pytest.mark.parametrize(("zone", "day", "hours"), CHANGES, ids=CHANGE_IDS)
def test_each_member_runs_once_per_local_day_at_its_local_time(planning, zone, day, hours):
    task = zoned_task(zone, day - 2 * DAY)
    crowd = member_create_many(external_ids=[f"m{n}" for n in range(150)])
    start = task.epoch - HOUR
    with time_machine.travel(start, tick=False):
        plan_days(task, start, 5)
    grid = recurring_task_schedule(task=task).current
    jobs = Job.objects.filter(payload__recurring_task_id=task.id)
    days_planned = [day - 2 * DAY + n * DAY for n in range(5)]
    for member in crowd:
        times = [local(t, zone) for t in runs(member)]
        assert [t.date() for t in times][:5] == days_planned  # once a local day
        assert runs(member)[:5] == [grid.occurrence(k, member.phase) for k in range(5)]
        wall = (dt.datetime.min + phase_offset(member.phase, DAY)).time()
        moved = [t for t in times[:5] if t.time() != wall]
        assert all(t.date() == day and t.time() == dt.time(3) and hours == 23 for t in moved)
    for k in range(5):  # every member exactly once in every period
        assert jobs.filter(payload__occurrence=k).count() == len(crowd)
    plans = SlicePlan.objects.filter(task=task, period=2).order_by("slice_index")
    assert plans.count() == 24
    assert plans.last().ends_at - plans.first().starts_at == hours * HOUR


@pytest_db
@pytest.mark.parametrize(("zone", "day"), SPRING + AUTUMN)
def test_a_member_due_at_0930_local_stays_at_0930_across_the_change(planning, zone, day):
    task = zoned_task(zone, day - DAY)
    member = member_at(dt.time(9, 30), "nine-thirty")
    with time_machine.travel(task.epoch - HOUR, tick=False):
        plan_days(task, task.epoch - HOUR, 3)
    times = [local(t, zone) for t in runs(member)]
    assert [(t.date(), t.time()) for t in times[:3]] == [
        (day + n * DAY, dt.time(9, 30)) for n in (-1, 0, 1)
    ]
    utc_hours = {t.astimezone(UTC).hour for t in times[:3]}
    assert len(utc_hours) == 2  # the same local time is another UTC hour after the change


@pytest_db
@pytest.mark.parametrize(("zone", "day"), SPRING)
def test_the_skipped_wall_time_runs_at_the_jump(planning, zone, day):
    task = zoned_task(zone, day - DAY)
    member = member_at(dt.time(2, 30), "early")
    with time_machine.travel(task.epoch - HOUR, tick=False):
        plan_days(task, task.epoch - HOUR, 3)
    times = [local(t, zone) for t in runs(member)][:3]
    assert [t.time() for t in times] == [dt.time(2, 30), dt.time(3, 0), dt.time(2, 30)]
    jump = localtime.local_midnight(day, zone) + 2 * HOUR  # 02:00 standard = 03:00 summer
    assert times[1] == jump


@pytest_db
@pytest.mark.parametrize(
    ("zone", "day", "wall"), [(*AUTUMN[0], dt.time(2, 30)), (*AUTUMN[1], dt.time(1, 30))]
)
def test_the_doubled_wall_time_runs_once_at_its_first_occurrence(planning, zone, day, wall):
    task = zoned_task(zone, day - DAY)
    member = member_at(wall, "doubled")
    with time_machine.travel(task.epoch - HOUR, tick=False):
        plan_days(task, task.epoch - HOUR, 3)
    on_the_day = [t for t in runs(member) if local(t, zone).date() == day]
    assert len(on_the_day) == 1
    [when] = on_the_day
    assert local(when, zone).time() == wall and local(when, zone).fold == 0
    assert local(when + HOUR, zone).time() == wall  # an hour later the wall repeats: no run


@pytest_db
def test_member_next_runs_follow_the_local_days(planning):
    task = zoned_task(BERLIN, dt.date(2026, 3, 27))
    member = member_at(dt.time(9, 30), "next")
    after = utc(2026, 3, 27, 12)
    got = member_next_runs(member=member, task=task, count=3, after=after)
    assert got == [utc(2026, 3, 28, 8, 30), utc(2026, 3, 29, 7, 30), utc(2026, 3, 30, 7, 30)]


@pytest_db
@pytest.mark.parametrize("store", [PostgresJobStore, SqliteJobStore])
def test_the_orm_store_plans_the_same_zoned_times_as_the_statement(planning, monkeypatch, store):
    monkeypatch.setattr(slice_svc, "job_store", store)
    task = zoned_task(BERLIN, dt.date(2026, 10, 25), slices=1)
    crowd = member_create_many(external_ids=[f"m{n}" for n in range(100)])
    with time_machine.travel(task.epoch - HOUR, tick=False):
        plan_due_slices(now=task.epoch - HOUR)
    grid = recurring_task_schedule(task=task).current
    for member in crowd:
        assert runs(member)[0] == grid.occurrence(0, member.phase)


@pytest_db
@pytest.mark.parametrize("store", [PostgresRecurringStore, SqliteRecurringStore])
def test_a_member_activated_on_the_autumn_day_gets_its_job_still_ahead(
    planning, monkeypatch, store
):
    """The fixed-length formula would put a 05:00 CET member at 03:00 UTC; it runs at
    04:00 UTC. Activated at 03:30 UTC, its job is still ahead and is created."""
    monkeypatch.setattr(member_svc, "recurring_store", store)
    task = zoned_task(BERLIN, dt.date(2026, 10, 25))
    member = member_at(dt.time(5), "late-riser")
    with time_machine.travel(task.epoch - HOUR, tick=False):
        member_deactivate(member=member)
        plan_due_slices(now=task.epoch - HOUR)
    assert runs(member) == []
    with time_machine.travel(utc(2026, 10, 25, 3, 30), tick=False):
        member_activate(member=member)
    assert runs(member) == [utc(2026, 10, 25, 4)]
    job = Job.objects.get(payload__member_id=member.id)
    assert job.state == JobState.SCHEDULED


@pytest_db
def test_members_created_on_the_spring_day_are_planned_at_their_local_times(planning):
    task = zoned_task(NEW_YORK, dt.date(2026, 3, 8))
    with time_machine.travel(task.epoch - HOUR, tick=False):
        plan_due_slices(now=task.epoch - HOUR)
    now = utc(2026, 3, 8, 12)  # 08:00 EDT
    with time_machine.travel(now, tick=False):
        crowd = member_create_many(external_ids=[f"new{n}" for n in range(50)])
    grid = recurring_task_schedule(task=task).current
    planned = set(SlicePlan.objects.filter(task=task).values_list("period", "slice_index"))
    for member in crowd:
        ahead = [
            grid.occurrence(k, member.phase)
            for k in (0, 1)
            if (k, slice_of(member.phase, 24)) in planned
            and grid.occurrence(k, member.phase) >= now
        ]
        assert runs(member) == ahead
    assert sum(len(runs(m)) for m in crowd) > 20


@pytest_db
def test_an_audience_task_plans_its_members_at_their_local_times(planning):
    from django.contrib.auth.models import User

    User.objects.bulk_create(User(username=f"user{n}") for n in range(40))
    task = zoned_task(NEW_YORK, dt.date(2026, 11, 1), audience="auth.User", slices=4)
    with time_machine.travel(task.epoch - HOUR, tick=False):
        plan_due_slices(now=task.epoch - HOUR)
    grid = recurring_task_schedule(task=task).current
    from tasksapp.recurring.models import AudienceMember

    phases = dict(AudienceMember.objects.filter(task=task).values_list("member_id", "phase"))
    jobs = Job.objects.filter(payload__recurring_task_id=task.id, payload__occurrence=0)
    assert jobs.count() == len(phases) == 40
    for job in jobs:
        assert job.run_at == grid.occurrence(0, phases[job.payload["member_id"]])


# --- creating and changing a zoned task --------------------------------------------------


@pytest_db
def test_a_zoned_tasks_epoch_is_its_first_local_midnight(planning):
    task = recurring_task_create(
        name="t",
        handler=HANDLER,
        period=7 * DAY,
        epoch=utc(2026, 3, 29, 15),
        timezone=BERLIN,
    )
    assert task.timezone == BERLIN
    assert task.epoch == utc(2026, 3, 28, 23)  # 2026-03-29 00:00 CET (CEST from 02:00)
    assert local(task.epoch, BERLIN).replace(tzinfo=None) == dt.datetime(2026, 3, 29)


@pytest_db
def test_a_zoned_tasks_epoch_defaults_to_todays_local_midnight(planning):
    with time_machine.travel(utc(2026, 6, 2, 2, 30), tick=False):  # 1 June, 22:30 in New York
        task = recurring_task_create(name="t", handler=HANDLER, period=DAY, timezone=NEW_YORK)
    assert task.epoch == utc(2026, 6, 1, 4)


@pytest_db
def test_a_utc_task_is_unchanged(planning):
    default = recurring_task_create(
        name="a", handler=HANDLER, period=7 * HOUR, epoch=utc(2026, 3, 28, 7, 15)
    )
    named = recurring_task_create(
        name="b", handler=HANDLER, period=DAY, epoch=utc(2026, 3, 28, 7, 15), timezone="UTC"
    )
    assert default.timezone == named.timezone == "UTC"
    assert named.epoch == utc(2026, 3, 28, 7, 15)  # not moved to a midnight
    grid = recurring_task_schedule(task=named).current
    assert grid.period_start(1) - grid.period_start(0) == DAY  # across the Berlin change too


@pytest_db
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"timezone": "Mars/Olympus"}, task_svc.ERR_TIMEZONE.format(value="Mars/Olympus")),
        ({"timezone": "../etc/passwd"}, task_svc.ERR_TIMEZONE.format(value="../etc/passwd")),
        ({"timezone": None}, task_svc.ERR_TIMEZONE.format(value=None)),
        (
            {"timezone": BERLIN, "period": 36 * HOUR},
            task_svc.ERR_TIMEZONE_DAYS.format(zone=BERLIN, period=36 * HOUR),
        ),
    ],
)
def test_a_bad_zone_is_refused_and_nothing_is_stored(planning, fields, message):
    arguments = {"name": "t", "handler": HANDLER, "period": DAY, **fields}
    with pytest.raises(PlanningInputError) as refused:
        recurring_task_create(**arguments)
    assert str(refused.value) == message
    assert not RecurringTask.objects.exists()


@pytest_db
def test_a_zoned_task_keeps_whole_days_on_update(planning):
    task = zoned_task(BERLIN, dt.date(2026, 3, 27))
    with pytest.raises(PlanningInputError) as refused:
        recurring_task_update(task=task, period=12 * HOUR)
    assert str(refused.value) == task_svc.ERR_TIMEZONE_DAYS.format(zone=BERLIN, period=12 * HOUR)
    recurring_task_update(task=task, period=2 * DAY, now=utc(2026, 3, 27, 12))
    task.refresh_from_db()
    pending = recurring_task_schedule(task=task).pending
    assert local(pending.start, BERLIN).time() == dt.time(0)


@pytest_db
def test_retries_must_fit_the_shortest_local_day(planning):
    with pytest.raises(PlanningInputError) as refused:
        zoned_task(BERLIN, dt.date(2026, 3, 27), max_attempts=2, retry_policy={"delays": [82800]})
    assert "(79200 s)" in str(refused.value)  # 24 h less the most a DST change takes
    utc_task = recurring_task_create(
        name="utc", handler=HANDLER, period=DAY, max_attempts=2, retry_policy={"delays": [82800]}
    )
    assert utc_task.timezone == "UTC"


@pytest_db
def test_the_plan_page_shows_the_current_slice_of_a_25_hour_day(planning):
    task = zoned_task(BERLIN, dt.date(2026, 10, 25))
    view = recurring_task_plan(task=task, period=0, now=utc(2026, 10, 25, 1, 30))
    assert view.period_end - view.period_start == 25 * HOUR
    assert view.current_slice == 2  # 02:xx CET, the second time: slice 02:00-03:00
    assert view.slices[2].ends_at - view.slices[2].starts_at == 2 * HOUR


@pytest_db
def test_bulk_filled_members_are_planned_by_a_zoned_task(planning):
    """The demos' and benchmarks' bulk fill (sql.INSERT_GOLDEN_MEMBERS) gives members a
    zoned task plans like any other."""
    from django.db import connection

    from tasksapp.recurring import sql

    with connection.cursor() as cursor:
        cursor.execute(sql.INSERT_GOLDEN_MEMBERS, {"prefix": "bulk-", "start": 0, "stop": 240})
    task = zoned_task(BERLIN, dt.date(2026, 3, 29), slices=1)
    with time_machine.travel(task.epoch - HOUR, tick=False):
        plan_due_slices(now=task.epoch - HOUR)
    assert (
        Job.objects.filter(payload__recurring_task_id=task.id, payload__occurrence=0).count() == 240
    )


@pytest_db
def test_a_new_epoch_of_a_zoned_task_moves_to_its_local_midnight(planning):
    task = zoned_task(NEW_YORK, dt.date(2026, 3, 1))
    recurring_task_update(task=task, epoch=utc(2026, 3, 9, 3))  # 8 March, 23:00 EDT
    task.refresh_from_db()
    assert task.epoch == utc(2026, 3, 8, 5)  # 8 March 00:00 EST: that day lasts 23 hours
    same_day = recurring_task_update(task=task, epoch=utc(2026, 3, 8, 20))
    assert same_day.epoch == task.epoch
