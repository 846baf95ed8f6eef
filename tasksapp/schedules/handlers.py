"""The handler of runs whose schedule does not allow overlaps: the policy is checked
against the previous run when this one starts, then the schedule's handler runs with
the schedule's payload (registered in every process by TasksappConfig.ready)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from tasksapp.engine.handlers import JobContext, job_handler, resolve_handler
from tasksapp.schedules.models import GUARD_HANDLER
from tasksapp.schedules.services import schedule_overlap_check


@job_handler(name=GUARD_HANDLER)
def guarded_run(ctx: JobContext) -> Any:
    fire = ctx.payload
    decision = schedule_overlap_check(
        schedule_id=fire["schedule"],
        fire_at=dt.datetime.fromisoformat(fire["fire_at"]),
        policy=fire["overlap"],
    )
    if not decision.run:
        return {"skipped": "overlap", **decision.details}
    handler = resolve_handler(fire["handler"])
    return handler(dataclasses.replace(ctx, payload=fire["payload"]))
