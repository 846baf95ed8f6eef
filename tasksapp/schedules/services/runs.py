"""The overlap policy, decided when a run starts: against the state of the previous run
(the latest earlier fire time of the schedule whose job was not skipped)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from tasksapp.engine.models import Job
from tasksapp.engine.models.jobs import FINAL_STATES
from tasksapp.engine.services import job_cancel
from tasksapp.schedules.models import Overlap, RunOutcome, ScheduleRun

NOT_RUN = (RunOutcome.SKIPPED_OVERLAP, RunOutcome.SKIPPED_MISSED, RunOutcome.CANCELLED)


@dataclass(frozen=True)
class OverlapDecision:
    run: bool
    details: dict[str, Any] = field(default_factory=dict)


def schedule_overlap_check(
    *, schedule_id: int, fire_at: dt.datetime, policy: str
) -> OverlapDecision:
    """Whether the run of `fire_at` may start: yes if the previous run has finished (or
    its job is gone); else by `policy`: `skip` records this run as skipped, and
    `cancel_previous` cancels the previous run's job (a running one is asked to stop)."""
    previous = (
        ScheduleRun.objects.filter(
            schedule_id=schedule_id, fire_at__lt=fire_at, job_id__isnull=False
        )
        .exclude(outcome__in=NOT_RUN)
        .order_by("-fire_at")
        .values_list("job_id", flat=True)
        .first()
    )
    state = Job.objects.filter(id=previous).values_list("state", flat=True).first()
    if previous is None or state is None or state in FINAL_STATES or policy == Overlap.ALLOW:
        return OverlapDecision(run=True)
    details = {"previous_job": previous, "previous_state": state}
    this_run = ScheduleRun.objects.filter(schedule_id=schedule_id, fire_at=fire_at)
    if policy == Overlap.SKIP:
        this_run.update(outcome=RunOutcome.SKIPPED_OVERLAP, details=details)
        return OverlapDecision(run=False, details=details)
    job_cancel(job_id=previous)
    details = {**details, "cancelled_previous": True}
    this_run.update(details=details)
    return OverlapDecision(run=True, details=details)
