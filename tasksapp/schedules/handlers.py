"""The handler of a schedule's runs (registered in every process by TasksappConfig.ready):
as its job starts, a late run follows the catch-up policy it was planned with
(services/late.py), and a run whose schedule does not allow overlaps is checked against
the previous run; then the schedule's handler runs with the schedule's payload, in the
same attempt (same transaction, time limit and delivery mode)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from tasksapp.engine.handlers import JobContext, job_handler, resolve_handler
from tasksapp.schedules.models import GUARD_HANDLER, Overlap
from tasksapp.schedules.services import schedule_late_check, schedule_overlap_check


@job_handler(name=GUARD_HANDLER)
def guarded_run(ctx: JobContext) -> Any:
    fire = ctx.payload
    schedule_id, fire_at = fire["schedule"], dt.datetime.fromisoformat(fire["fire_at"])
    late = schedule_late_check(
        schedule_id=schedule_id,
        fire_at=fire_at,
        run_at=ctx.run_at,
        attempt=ctx.attempt,
        catchup=fire.get("catchup"),  # none: an operator's run, or planned before checks
        window_s=fire.get("catchup_window_s"),
    )
    if not late.run:
        return {"skipped": "missed", **late.details}
    if fire["overlap"] != Overlap.ALLOW:
        decision = schedule_overlap_check(
            schedule_id=schedule_id, fire_at=fire_at, policy=fire["overlap"], details=late.details
        )
        if not decision.run:
            return {"skipped": "overlap", **decision.details}
    handler = resolve_handler(fire["handler"])
    return handler(dataclasses.replace(ctx, payload=fire["payload"]))
