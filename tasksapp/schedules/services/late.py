"""Runs that start late: jobs planned before an outage of the dispatchers or workers are
due in the past when those come back. Each such run follows its schedule's catch-up
policy, decided by the guard handler when its job's first attempt starts, on the
database clock.

A run is late when its job starts more than LATE_GRACE_SECONDS after its run time. Then,
by the policy planned with it (`catchup`, `catchup_window`):
- skip: it does not run;
- one: it runs if no later fire time of the schedule is due by then (its run time has
  passed) and its fire time is within the window;
- all: it runs if its fire time is within the window.

A decision reads the instant and the planned run times of the later fire times (fixed
when they were planned), never another run's outcome: whichever of the late jobs starts
first, and whether the others' decisions are committed yet (a transactional job decides
inside its own transaction), the latest due one runs and the others are skipped.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from tasksapp.engine.db import on_postgres, tempo_connection
from tasksapp.schedules.models import Catchup, RunOutcome, ScheduleRun
from tasksapp.schedules.settings import schedule_settings

# In a run's details: the run was decided at its start, this many seconds late.
LATE_MARK = "late_by_s"
# Later runs that do not make an earlier one pointless: a paused schedule's, an
# operator's extra run.
NOT_FIRES = (RunOutcome.CANCELLED, RunOutcome.RUN_NOW)

WHY_SKIP = "started {late:g} s after its run time (late grace {grace:g} s); catch-up 'skip'"
WHY_WINDOW = (
    "started {late:g} s after its run time (late grace {grace:g} s); its fire time is older"
    " than the catch-up window ({window:g} s)"
)
WHY_LATER = (
    "started {late:g} s after its run time (late grace {grace:g} s); catch-up 'one' runs"
    " the latest late fire only, and the fire of {later} is due too"
)


@dataclass(frozen=True)
class LateDecision:
    run: bool
    outcome: str | None = None  # what its run records; None: on time, nothing recorded
    details: dict[str, Any] = field(default_factory=dict)


def late_run_decided(
    *,
    catchup: str,
    window: dt.timedelta,
    grace: dt.timedelta,
    fire_at: dt.datetime,
    run_at: dt.datetime,
    now: dt.datetime,
    later_due: dt.datetime | None,
) -> LateDecision:
    """Whether a run starting at `now` runs (pure). `later_due`: a later fire time of the
    schedule whose run time is at or before `now` (None: there is none)."""
    late = now - run_at
    if late <= grace:
        return LateDecision(run=True)
    seconds, grace_s = round(late.total_seconds(), 3), grace.total_seconds()
    details: dict[str, Any] = {LATE_MARK: seconds, "catchup": catchup}
    if catchup == Catchup.SKIP:
        why = WHY_SKIP.format(late=seconds, grace=grace_s)
    elif fire_at <= now - window:
        why = WHY_WINDOW.format(late=seconds, grace=grace_s, window=window.total_seconds())
        details["outside_window"] = True
    elif catchup == Catchup.ONE and later_due is not None:
        why = WHY_LATER.format(late=seconds, grace=grace_s, later=later_due.isoformat())
        details["later_fire"] = later_due.isoformat()
    else:
        return LateDecision(run=True, outcome=RunOutcome.CAUGHT_UP, details=details)
    return LateDecision(
        run=False, outcome=RunOutcome.SKIPPED_MISSED, details=details | {"why": why}
    )


def database_now() -> dt.datetime:
    """The database clock now (this machine's without PostgreSQL)."""
    if not on_postgres():
        return timezone.now()
    with tempo_connection().cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def later_fire_due(*, schedule_id: int, fire_at: dt.datetime, now: dt.datetime):
    """The latest fire time after `fire_at` whose run is due by `now` (None: none)."""
    return (
        ScheduleRun.objects.filter(schedule_id=schedule_id, fire_at__gt=fire_at, run_at__lte=now)
        .exclude(outcome__in=NOT_FIRES)
        .order_by("-fire_at")
        .values_list("fire_at", flat=True)
        .first()
    )


def late_check_applies(*, catchup: Any, attempt: int, outcome: str, details: dict) -> bool:
    """Whether a run's start decides its catch-up: a fire's first attempt (a retry runs
    what its first attempt began), not an operator's run, not decided already."""
    return (
        catchup is not None
        and attempt == 1
        and outcome != RunOutcome.RUN_NOW
        and LATE_MARK not in details
    )


def schedule_late_check(
    *,
    schedule_id: int,
    fire_at: dt.datetime,
    run_at: dt.datetime,
    attempt: int,
    catchup: str | None,
    window_s: float | None,
) -> LateDecision:
    """Decide a run as its job starts: on time, it runs and nothing is recorded; late, by
    the policy it was planned with (`catchup` None: planned before runs were checked),
    its run recording `caught_up` or `skipped_missed` and why. A run decided skipped
    stays skipped on a redelivery of its job."""
    if catchup is None:
        return LateDecision(run=True)
    now = database_now()
    grace = dt.timedelta(seconds=schedule_settings().late_grace_seconds)
    if now - run_at <= grace:  # on time: one query, nothing recorded
        return LateDecision(run=True)
    this_run = ScheduleRun.objects.filter(schedule_id=schedule_id, fire_at=fire_at)
    run = this_run.values("outcome", "details").first()
    if run is None:  # its schedule was deleted while the job ran
        return LateDecision(run=True)
    if run["outcome"] == RunOutcome.SKIPPED_MISSED:
        return LateDecision(run=False, details=run["details"])
    if not late_check_applies(catchup=catchup, attempt=attempt, **run):
        return LateDecision(run=True, details=run["details"])
    decision = late_run_decided(
        catchup=catchup,
        window=dt.timedelta(seconds=window_s or 0),
        grace=grace,
        fire_at=fire_at,
        run_at=run_at,
        now=now,
        later_due=later_fire_due(schedule_id=schedule_id, fire_at=fire_at, now=now),
    )
    if decision.outcome is not None:
        this_run.update(outcome=decision.outcome, details=decision.details)
    return decision
