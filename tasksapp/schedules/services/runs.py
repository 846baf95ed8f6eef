"""The overlap policy, decided when a run starts: against the state of the previous run
(the latest earlier fire time of the schedule whose job was not skipped, and will not
skip itself as a late run: late.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.models.jobs import DUE_STATES, FINAL_STATES
from tasksapp.engine.services import job_cancel
from tasksapp.schedules.models import GUARD_HANDLER, Overlap, RunOutcome, ScheduleRun
from tasksapp.schedules.settings import schedule_settings

from .late import NOT_FIRES, database_now, late_check_applies, late_run_decided

NOT_RUN = (RunOutcome.SKIPPED_OVERLAP, RunOutcome.SKIPPED_MISSED, RunOutcome.CANCELLED)
FIRST_CHUNK, CHUNK = 4, 200  # earlier runs read at a time: usually the first finished


@dataclass(frozen=True)
class OverlapDecision:
    run: bool
    details: dict[str, Any] = field(default_factory=dict)


def schedule_overlap_check(
    *, schedule_id: int, fire_at: dt.datetime, policy: str, details: dict | None = None
) -> OverlapDecision:
    """Whether the run of `fire_at` may start: yes if the previous run has finished (or
    its job is gone); else by `policy`: `skip` records this run as skipped, and
    `cancel_previous` cancels the previous run's job (a running one is asked to stop).
    `details`: what the run records already (kept beside the overlap's)."""
    if policy == Overlap.ALLOW:
        return OverlapDecision(run=True)
    previous, state = previous_run(schedule_id=schedule_id, fire_at=fire_at)
    if previous is None or state is None or state in FINAL_STATES:
        return OverlapDecision(run=True)
    found = {"previous_job": previous, "previous_state": state}
    this_run = ScheduleRun.objects.filter(schedule_id=schedule_id, fire_at=fire_at)
    if policy == Overlap.SKIP:
        this_run.update(outcome=RunOutcome.SKIPPED_OVERLAP, details={**(details or {}), **found})
        return OverlapDecision(run=False, details=found)
    job_cancel(job_id=previous)
    found = {**found, "cancelled_previous": True}
    this_run.update(details={**(details or {}), **found})
    return OverlapDecision(run=True, details=found)


def previous_run(*, schedule_id: int, fire_at: dt.datetime) -> tuple[int | None, str | None]:
    """The previous run's job and its state (None: removed): the latest earlier run with a
    job that was not skipped or cancelled, passing over the late runs whose own start
    skips them (their catch-up decided at the earliest instant they can start)."""
    now = database_now()
    grace = dt.timedelta(seconds=schedule_settings().late_grace_seconds)
    runs = ScheduleRun.objects.filter(schedule_id=schedule_id).order_by("-fire_at")
    later = runs.filter(fire_at__gte=fire_at, run_at__isnull=False).exclude(outcome__in=NOT_FIRES)
    due = later.order_by("run_at").values_list("run_at", "fire_at").first()  # earliest due
    before, size = fire_at, FIRST_CHUNK
    while chunk := list(runs.filter(fire_at__lt=before)[:size]):
        ids = [run.job_id for run in chunk if run.job_id is not None]
        jobs = {job.id: job for job in Job.objects.filter(id__in=ids)}
        for run in chunk:
            job = jobs.get(run.job_id)
            if run.job_id is not None and run.outcome not in NOT_RUN:
                if job is None or job.state in FINAL_STATES:
                    return run.job_id, None if job is None else job.state
                if not _skips_itself(run, job, due=due, now=now, grace=grace):
                    return run.job_id, job.state
            if run.outcome not in NOT_FIRES and run.run_at is not None:
                due = min(due, (run.run_at, run.fire_at)) if due else (run.run_at, run.fire_at)
        before, size = chunk[-1].fire_at, CHUNK
    return None, None


def _skips_itself(
    run: ScheduleRun, job: Job, *, due: tuple | None, now: dt.datetime, grace: dt.timedelta
) -> bool:
    """Whether an unfinished earlier run is a late one its own start will skip. It starts
    no earlier than its claim (now, if not claimed yet); each policy's skip holds from
    any instant on (lateness, a later fire due and the window only grow), so a skip
    decided at that instant is the one its start decides."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    catchup = payload.get("catchup") if job.handler == GUARD_HANDLER else None
    # The attempt its start runs: a claim counted it already; a due job's is the next.
    attempt = job.attempts + (job.state in DUE_STATES)
    if not late_check_applies(catchup=catchup, attempt=attempt, **_recorded(run)):
        return False
    starts = now if job.state == JobState.SCHEDULED else job.claimed_at or now
    decision = late_run_decided(
        catchup=catchup,
        window=dt.timedelta(seconds=payload.get("catchup_window_s") or 0),
        grace=grace,
        fire_at=run.fire_at,
        run_at=job.run_at,
        now=starts,
        later_due=due[1] if due is not None and due[0] <= starts else None,
    )
    return not decision.run


def _recorded(run: ScheduleRun) -> dict[str, Any]:
    return {"outcome": run.outcome, "details": run.details or {}}
