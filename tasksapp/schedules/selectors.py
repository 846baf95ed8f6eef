"""Reads of schedules: their fire times (the planner's own rule), the cron in words, the
next fires, the last runs with their jobs' state and lag."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from cron_descriptor import ExpressionDescriptor, Options

from tasksapp.engine.models import Job
from tasksapp.schedules.fire_times import FireRule, validated_zone
from tasksapp.schedules.models import Schedule, ScheduleRun

ERR_RANGE = "start and end must be timezone-aware datetimes, start before end."
ERR_TOO_MANY = "more than {limit} fire times between start and end: ask for a shorter range."
MAX_FIRE_TIMES = 10_000
_MICROSECOND = dt.timedelta(microseconds=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class ScheduleReadError(ValueError):
    """A read was asked with bad arguments; the message says what to fix."""


def schedule_rule(*, schedule: Schedule) -> FireRule:
    """The rule the planner decides the schedule's fire times with."""
    every = schedule.every
    first = _EPOCH  # unused by a cron: rules of one cron and zone compare equal
    if every is not None:  # the first fire: start_at, or one interval after creation
        first = schedule.start_at or schedule.created_at + every
    return FireRule(
        cron=schedule.cron,
        every=every,
        zone=validated_zone(schedule.timezone),
        first=first,
        start_at=schedule.start_at,
        end_at=schedule.end_at,
    )


def schedule_fire_times(
    *, schedule: Schedule, start: dt.datetime, end: dt.datetime, limit: int = MAX_FIRE_TIMES
) -> list[dt.datetime]:
    """The instants (UTC) the planner fires the schedule at in [start, end], from the
    same rule; ScheduleReadError past `limit` of them."""
    aware = all(isinstance(t, dt.datetime) and t.tzinfo is not None for t in (start, end))
    if not aware or end < start:
        raise ScheduleReadError(ERR_RANGE)
    fires = []
    for fire in schedule_rule(schedule=schedule).fires(after=start - _MICROSECOND, until=end):
        if len(fires) >= limit:
            raise ScheduleReadError(ERR_TOO_MANY.format(limit=limit))
        fires.append(fire)
    return fires


@dataclass(frozen=True)
class FireTime:
    utc: dt.datetime
    local: dt.datetime  # in the schedule's zone


def schedule_next_fires(
    *, schedule: Schedule, after: dt.datetime, count: int = 10
) -> list[FireTime]:
    """The next `count` fire times after `after`, in UTC and in the schedule's zone."""
    rule = schedule_rule(schedule=schedule)
    found: list[FireTime] = []
    for fire in rule.fires(after=after, until=dt.datetime.max.replace(tzinfo=dt.UTC)):
        found.append(FireTime(utc=fire, local=fire.astimezone(rule.zone)))
        if len(found) >= count:
            break
    return found


def _plural(value: float, unit: str) -> str:
    return f"{value:g} {unit}" + ("" if value == 1 else "s")


def interval_in_words(every: dt.timedelta) -> str:
    seconds = every.total_seconds()
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size and seconds % size == 0:
            return "Every " + _plural(seconds / size, unit)
    return "Every " + _plural(seconds, "second")


def schedule_in_words(*, schedule: Schedule) -> str:
    """The cron in words (cron-descriptor; 6 fields: seconds first), or the interval."""
    if schedule.every is not None:
        return interval_in_words(schedule.every) + " (elapsed time)"
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = True
    return f"{ExpressionDescriptor(schedule.cron, options)} ({schedule.timezone})"


@dataclass(frozen=True)
class RunView:
    run: ScheduleRun
    job_state: str | None  # None: no job, or removed by retention
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    lag: dt.timedelta | None  # when its handler began, after its run time

    @property
    def lag_ms(self) -> float | None:
        return None if self.lag is None else self.lag / dt.timedelta(milliseconds=1)


def schedule_runs(*, schedule: Schedule, limit: int = 20) -> list[RunView]:
    """The schedule's last runs (latest fire first) with their jobs' state and start lag."""
    runs = list(ScheduleRun.objects.filter(schedule=schedule).order_by("-fire_at")[:limit])
    ids = [run.job_id for run in runs if run.job_id is not None]
    jobs = {
        row["id"]: row
        for row in Job.objects.filter(id__in=ids).values(
            "id", "state", "started_at", "finished_at", "run_at"
        )
    }
    views = []
    for run in runs:
        job: dict[str, Any] = jobs.get(run.job_id, {})
        started = job.get("started_at")
        lag = started - job["run_at"] if started is not None else None
        views.append(
            RunView(
                run=run,
                job_state=job.get("state"),
                started_at=started,
                finished_at=job.get("finished_at"),
                lag=lag,
            )
        )
    return views


def schedule_list() -> list[Schedule]:
    return list(Schedule.objects.order_by("name"))


def schedule_get(*, schedule_id: int) -> Schedule | None:
    return Schedule.objects.filter(id=schedule_id).first()
