"""Operators' actions on schedules: each checks the operator role, calls the one schedule
service that owns the change and records who did what (OperatorAction, target type
`schedule`) in the same transaction. A refused action changes nothing and records
nothing (operators.py says how refusals for want of a role are recorded)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tasksapp.schedules.models import Schedule, ScheduleRun
from tasksapp.schedules.services import (
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_run_now,
    schedule_update,
)
from tasksapp.web.operators import (
    ERR_NOT_OPERATOR,
    PERM_OPERATE,
    OperatorPermissionError,
    operator_action_record,
)
from tasksapp.web.transactions import audited_atomic

TARGET = "schedule"


def _require_operator(user: Any) -> None:
    if not (user and user.is_authenticated and user.has_perm(PERM_OPERATE)):
        raise OperatorPermissionError(ERR_NOT_OPERATOR.format(user=user or "anonymous"))


def _plain(value: Any) -> Any:
    """A value as the audit log's JSON keeps it."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


def _record(user: Any, via: str, action: str, schedule_id: int, details: dict) -> None:
    operator_action_record(
        user=user,
        via=via,
        action=action,
        target_type=TARGET,
        target_id=schedule_id,
        details={name: _plain(value) for name, value in details.items()},
    )


def schedule_create_audited(*, user: Any, via: str, **values: Any) -> Schedule:
    _require_operator(user)
    with audited_atomic():
        schedule = schedule_create(**values)
        _record(user, via, "schedule_create", schedule.id, {"name": schedule.name, **values})
    return schedule


def schedule_update_audited(*, user: Any, schedule_id: int, via: str, **changes: Any) -> Schedule:
    """An edit, recorded with each changed field before and after."""
    _require_operator(user)
    with audited_atomic():
        before = Schedule.objects.filter(id=schedule_id).first()
        schedule = schedule_update(schedule_id=schedule_id, **changes)
        changed = {
            name: {
                "before": _plain(getattr(before, name)),
                "after": _plain(getattr(schedule, name)),
            }
            for name in changes
            if getattr(before, name) != getattr(schedule, name)
        }
        _record(
            user, via, "schedule_edit", schedule.id, {"name": schedule.name, "changed": changed}
        )
    return schedule


def _active_audited(service, action: str, *, user: Any, schedule_id: int, via: str) -> Schedule:
    _require_operator(user)
    with audited_atomic():
        was = Schedule.objects.filter(id=schedule_id).values_list("active", flat=True).first()
        schedule = service(schedule_id=schedule_id)
        details = {"name": schedule.name, "active_before": was, "active_after": schedule.active}
        _record(user, via, action, schedule.id, details)
    return schedule


def schedule_pause_audited(*, user: Any, schedule_id: int, via: str) -> Schedule:
    """Stop planning; waiting runs ahead cancelled (schedule_pause), recorded."""
    return _active_audited(
        schedule_pause, "schedule_pause", user=user, schedule_id=schedule_id, via=via
    )


def schedule_resume_audited(*, user: Any, schedule_id: int, via: str) -> Schedule:
    """Plan again (schedule_resume), recorded."""
    return _active_audited(
        schedule_resume, "schedule_resume", user=user, schedule_id=schedule_id, via=via
    )


def schedule_run_now_audited(*, user: Any, schedule_id: int, via: str) -> ScheduleRun:
    """One extra run now (schedule_run_now), recorded with its job."""
    _require_operator(user)
    with audited_atomic():
        run = schedule_run_now(schedule_id=schedule_id)
        details = {"name": run.schedule.name, "job_id": run.job_id, "fire_at": run.fire_at}
        _record(user, via, "schedule_run_now", schedule_id, details)
    return run


def schedule_delete_audited(*, user: Any, schedule_id: int, via: str) -> dict[str, Any]:
    """Delete the schedule, its waiting jobs cancelled (schedule_delete), recorded."""
    _require_operator(user)
    with audited_atomic():
        deleted = schedule_delete(schedule_id=schedule_id)
        _record(user, via, "schedule_delete", schedule_id, deleted)
    return deleted
