"""The planner: turns each active schedule's fire times up to now + the horizon into
jobs, ahead of time, exactly once per fire time.

Each pass locks a batch of due schedules (FOR UPDATE SKIP LOCKED: planners running at
once share the work), decides their fire times after `planned_until`, inserts the jobs
in one statement and records one ScheduleRun per fire time. Even two planners deciding
the same fire time create one job: its key `schedule:<id>:<fire>` is unique in the jobs
table, and (schedule, fire_at) in the runs table.

Fire times found already past (`late_grace_seconds` and more) were missed — the planner
did not run — and the schedule's catch-up policy decides: `skip` runs none, `one` runs
the latest within `catchup_window` now, `all` runs each within the window now. Fire
times older than the window are skipped, recorded as one row at the first of them.
Fire times planned in time whose jobs start late (the dispatchers or workers were down)
follow the same policy when they start (late.py, through the guard handler).
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.models import Job
from tasksapp.engine.store import job_store
from tasksapp.engine.store.rows import NewJob
from tasksapp.schedules.fire_times import FireRule, fire_key, fires_between, jitter_offset
from tasksapp.schedules.models import (
    GUARD_HANDLER,
    KEY_PREFIX,
    Catchup,
    Overlap,
    RunOutcome,
    Schedule,
    ScheduleRun,
)
from tasksapp.schedules.selectors import schedule_rule
from tasksapp.schedules.settings import schedule_settings
from tasksapp.schedules.store import NewRun, insert_runs, update_planned


@dataclass(frozen=True)
class FireDecision:
    fire: dt.datetime
    outcome: str
    run_at: dt.datetime | None  # None: no job
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FirePlan:
    decisions: list[FireDecision]
    planned_until: dt.datetime
    next_fire: dt.datetime | None  # the first fire time after planned_until; None: ended


FOREVER = dt.datetime.max.replace(tzinfo=dt.UTC) - dt.timedelta(days=2)


def next_fire_after(rule: FireRule, after: dt.datetime) -> dt.datetime | None:
    return next(iter(rule.fires(after=after, until=FOREVER)), None)


@functools.lru_cache(maxsize=512)  # at most FIRES_PER_PASS fire times each
def fires_ahead(
    rule: FireRule, after: dt.datetime, until: dt.datetime, limit: int
) -> tuple[list[dt.datetime], dt.datetime | None]:
    """At most `limit` fire times in (after, until], and the first one left undecided.
    Remembered: the schedules of one cron, zone and bounds share them in a pass (their
    `planned_until` is the previous pass's horizon), so each is computed once. Callers
    do not change the list."""
    fires: list[dt.datetime] = []
    for fire in rule.fires(after=after, until=FOREVER):
        if fire > until or len(fires) >= limit:
            return fires, fire  # the first one this pass leaves undecided
        fires.append(fire)
    return fires, None


def fires_decided(
    *,
    rule: FireRule,
    schedule_id: int,
    catchup: str,
    window: dt.timedelta,
    jitter: dt.timedelta,
    planned_until: dt.datetime,
    now: dt.datetime,
    until: dt.datetime,
    grace: dt.timedelta,
    limit: int,
) -> FirePlan:
    """What becomes of each fire time in (planned_until, until] (pure)."""
    decisions: list[FireDecision] = []
    after = planned_until
    window_start = now - window
    if after < window_start:
        old = fires_between(rule, after=after, until=window_start, limit=1)
        if old and old[0] < now - grace:
            details = {"outside_window": True, "skipped_through": window_start.isoformat()}
            decisions.append(FireDecision(old[0], RunOutcome.SKIPPED_MISSED, None, details))
        after = window_start
    fires, next_fire = fires_ahead(rule, after, until, limit)
    truncated = next_fire is not None and next_fire <= until
    late = now - grace
    missed = [fire for fire in fires if fire < late]
    upcoming = fires[len(missed) :]
    decisions += _missed_decided(missed, catchup, now, more=truncated and not upcoming)
    for fire in upcoming:
        run_at = fire + jitter_offset(schedule_id=schedule_id, fire=fire, jitter=jitter)
        decisions.append(FireDecision(fire, RunOutcome.PLANNED, run_at))
    return FirePlan(decisions, fires[-1] if truncated else until, next_fire)


def _missed_decided(
    missed: list[dt.datetime], catchup: str, now: dt.datetime, *, more: bool
) -> list[FireDecision]:
    """Missed fire times by the catch-up policy; `more`: later missed ones follow."""
    if catchup == Catchup.ALL:
        return [FireDecision(fire, RunOutcome.CAUGHT_UP, now) for fire in missed]
    run_last = catchup == Catchup.ONE and not more and missed
    skipped = missed[:-1] if run_last else missed
    decisions = [FireDecision(fire, RunOutcome.SKIPPED_MISSED, None) for fire in skipped]
    if run_last:
        decisions.append(FireDecision(missed[-1], RunOutcome.CAUGHT_UP, now))
    return decisions


def fire_job_key(*, schedule_id: int, fire: dt.datetime) -> str:
    return KEY_PREFIX.format(schedule_id=schedule_id) + fire_key(fire)


def schedule_job(
    *, schedule: Schedule, fire: dt.datetime, run_at: dt.datetime, key: str, run_now: bool = False
) -> NewJob:
    """The job of one fire time: the guard around the schedule's handler, which decides
    at its start whether a late run runs (its catch-up policy, as planned now) and
    checks the overlap policy. An operator's run (`run_now`) is never late: it names the
    schedule's handler itself when overlaps are allowed."""
    handler, payload = schedule.handler, schedule.payload
    if not run_now or schedule.overlap != Overlap.ALLOW:
        handler = GUARD_HANDLER
        payload = {
            "schedule": schedule.id,
            "fire_at": fire_key(fire),
            "overlap": schedule.overlap,
            "handler": schedule.handler,
            "payload": schedule.payload,
        }
        if not run_now:
            payload["catchup"] = schedule.catchup
            payload["catchup_window_s"] = schedule.catchup_window.total_seconds()
    return NewJob(
        handler=handler,
        run_at=run_at,
        payload=payload,
        max_attempts=schedule.max_attempts,
        retry_policy=schedule.retry_policy,
        delivery=schedule.delivery,
        time_limit=schedule.time_limit,
        idempotency_key=key,
        queue=schedule.queue,
        priority=schedule.priority,
        concurrency_key=schedule.concurrency_key,
    )


@dataclass
class PlanSummary:
    schedules: int = 0
    jobs: int = 0  # jobs this pass inserted
    caught_up: int = 0
    skipped: int = 0
    duration_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _plan_batch(batch: list[Schedule], *, now: dt.datetime, summary: PlanSummary) -> None:
    """Decide, insert and record the fire times of locked schedules (in a transaction)."""
    config = schedule_settings()
    until = now + dt.timedelta(seconds=config.horizon_seconds)
    grace = dt.timedelta(seconds=config.late_grace_seconds)
    runs: list[NewRun] = []
    jobs: list[NewJob] = []
    keys: list[str | None] = []  # each run's job key (None: no job)
    planned: list[tuple[int, dt.datetime, dt.datetime | None]] = []
    for schedule in batch:
        plan = fires_decided(
            rule=schedule_rule(schedule=schedule),
            schedule_id=schedule.id,
            catchup=schedule.catchup,
            window=schedule.catchup_window,
            jitter=schedule.jitter,
            planned_until=schedule.planned_until,
            now=now,
            until=until,
            grace=grace,
            limit=config.fires_per_pass,
        )
        for decision in plan.decisions:
            fire, run_at = decision.fire, decision.run_at
            runs.append(NewRun(schedule.id, fire, run_at, decision.outcome, decision.details))
            key = None
            if run_at is not None:
                key = fire_job_key(schedule_id=schedule.id, fire=fire)
                jobs.append(schedule_job(schedule=schedule, fire=fire, run_at=run_at, key=key))
            keys.append(key)
            summary.caught_up += decision.outcome == RunOutcome.CAUGHT_UP
            summary.skipped += decision.outcome == RunOutcome.SKIPPED_MISSED
        planned.append(
            (schedule.id, max(plan.planned_until, schedule.planned_until), plan.next_fire)
        )
    ids = _insert_jobs(jobs, summary)
    for run, key in zip(runs, keys, strict=True):
        run.job_id = ids.get(key) if key is not None else None
    insert_runs(runs)
    update_planned(planned)
    summary.schedules += len(batch)


def _insert_jobs(jobs: list[NewJob], summary: PlanSummary) -> dict[str, int]:
    """Insert the jobs in one statement; the id of each key, inserted or held already."""
    if not jobs:
        return {}
    inserted = job_store().insert_jobs(jobs)
    summary.jobs += len(inserted)
    ids = {row.idempotency_key: row.id for row in inserted}
    taken = [job.idempotency_key for job in jobs if job.idempotency_key not in ids]
    if taken:  # planned before (a racing planner): the job that holds the key
        held = Job.objects.filter(idempotency_key__in=taken).values_list("idempotency_key", "id")
        ids.update(held)
    return ids


def _due(until: dt.datetime):
    """The active schedules with a fire time to decide by `until`."""
    return Schedule.objects.filter(active=True, next_fire_at__lte=until).order_by("next_fire_at")


def schedule_next_fire_refresh(*, schedule_id: int) -> Schedule:
    """Recompute the first fire time after planned_until (the rule or planned_until
    changed: created, edited, resumed)."""
    schedule = Schedule.objects.get(id=schedule_id)
    schedule.next_fire_at = next_fire_after(
        schedule_rule(schedule=schedule), schedule.planned_until
    )
    Schedule.objects.filter(id=schedule_id).update(next_fire_at=schedule.next_fire_at)
    return schedule


def schedules_plan_due(*, now: dt.datetime | None = None) -> PlanSummary:
    """Plan every active schedule not yet planned up to now + the horizon (the beat runs
    this every minute; running it more often, or on several processes, is harmless)."""
    began = time.perf_counter()
    now = now or timezone.now()
    config = schedule_settings()
    until = now + dt.timedelta(seconds=config.horizon_seconds)
    summary = PlanSummary()
    while True:
        with tempo_atomic():
            due = _due(until).select_for_update(skip_locked=True)
            batch = list(due[: config.batch_size])
            if not batch:
                break
            _plan_batch(batch, now=now, summary=summary)
    summary.duration_ms = (time.perf_counter() - began) * 1000
    return summary


def schedule_plan(*, schedule_id: int, now: dt.datetime | None = None) -> PlanSummary:
    """Plan one schedule now (after it is created, edited or resumed); waits for a
    planner holding it."""
    now = now or timezone.now()
    until = now + dt.timedelta(seconds=schedule_settings().horizon_seconds)
    summary = PlanSummary()
    with tempo_atomic():
        while True:
            schedule = _due(until).select_for_update().filter(id=schedule_id).first()
            if schedule is None:
                return summary
            _plan_batch([schedule], now=now, summary=summary)


PRUNE_BATCH = 5000


def schedule_runs_prune(*, now: dt.datetime | None = None, batches: int = 20) -> int:
    """Remove runs decided more than RUNS_KEPT_DAYS ago, in batches; how many."""
    now = now or timezone.now()
    before = now - dt.timedelta(days=schedule_settings().runs_kept_days)
    removed = 0
    for _ in range(batches):
        ids = list(
            ScheduleRun.objects.filter(decided_at__lt=before).values_list("id", flat=True)[
                :PRUNE_BATCH
            ]
        )
        if not ids:
            break
        removed += ScheduleRun.objects.filter(id__in=ids).delete()[0]
    return removed
