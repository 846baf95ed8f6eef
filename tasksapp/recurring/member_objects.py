"""`ctx.member_object`: the object a recurring job runs for, loaded on first use.

For a task with an audience it is the audience's object, read through the audience (so
its filter holds at the run). A member whose object was deleted, or that left the
audience, does not run: the job is cancelled with that reason, even before the pass
has seen the change. For a task without an audience it is the Member row.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tasksapp.engine.handlers import JobCancelled, JobContext
from tasksapp.recurring.audiences import audience_queryset
from tasksapp.recurring.models import AudienceMember, Member, RecurringTask

log = logging.getLogger(__name__)

ERR_NOT_RECURRING = "ctx.member_object: job {job} was not planned by a recurring task."
REASON_GONE = "job {job} cancelled: its member {member} is gone (its object was deleted)"
REASON_LEFT = "job {job} cancelled: member {member} left the audience of task {task}"


def member_object(ctx: JobContext) -> Any:
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    task_id, member_id = payload.get("recurring_task_id"), payload.get("member_id")
    task = RecurringTask.objects.filter(pk=task_id).first() if task_id else None
    if task is None or not member_id:
        raise LookupError(ERR_NOT_RECURRING.format(job=ctx.job_id))
    member = Member.objects.filter(pk=member_id).first()
    if member is None:
        _cancel(REASON_GONE.format(job=ctx.job_id, member=member_id))
    if not task.audience:
        return member
    held = AudienceMember.objects.filter(task=task, member=member).exists()
    found = audience_queryset(task.audience, task.audience_filter).filter(pk=member.object_id)
    obj = found.first() if held else None
    if obj is None:
        _cancel(REASON_LEFT.format(job=ctx.job_id, member=member.external_id, task=task.name))
    return obj


AUDIENCE_CACHE_SECONDS = 5.0  # how long a worker trusts whether a task has an audience
_has_audience: dict[int, tuple[bool, float]] = {}  # task id -> (has one, read at)


def member_still_in_audience(ctx: JobContext) -> None:
    """Before each handler: a recurring job of a task with an audience whose member left
    it, or whose object is gone, is cancelled with that reason, whether or not its handler
    reads ctx.member_object (the object it loads is kept for the handler). Other jobs
    cost a look at their payload; jobs of tasks without an audience, a cached read."""
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    task_id = payload.get("recurring_task_id")
    if not isinstance(task_id, int) or not payload.get("member_id"):
        return
    if _task_has_audience(task_id):
        _ = ctx.member_object  # JobCancelled(reason) if the member left or is gone


def _task_has_audience(task_id: int) -> bool:
    known = _has_audience.get(task_id)
    if known is not None and time.monotonic() - known[1] < AUDIENCE_CACHE_SECONDS:
        return known[0]
    audience = RecurringTask.objects.filter(pk=task_id).values_list("audience", flat=True)
    has = bool(audience.first())
    _has_audience[task_id] = (has, time.monotonic())
    return has


def _cancel(reason: str):
    log.info("%s", reason)
    raise JobCancelled(reason)
