"""Operators' actions: the roles that may take them, and every action recorded.

The dashboard, the HTTP API and the admin all call the `*_audited` functions here: each
checks the user's permission, calls the one service that owns the change, and records
who did what, when and through which entry point, in one transaction. A failed action
(wrong state, bad input) changes nothing and records nothing.

A mutating request refused for want of a role (a viewer's retry, an API write by a user
in no group, an admin action the user may not take) changes nothing and is recorded by
`operator_refusal_record` as `denied:<action>`, when the user is logged in. Anonymous
requests are not recorded: they are refused before anything runs (login page, 401), so
recording them would let anyone grow the table; throttling bounds them instead.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.views.decorators.debug import sensitive_variables

from tasksapp.engine.models import Job, JobQueue, RoutingMode
from tasksapp.engine.options import MAX_PRIORITY
from tasksapp.engine.queues import queue_configure, routing_degrade, routing_restore
from tasksapp.engine.services import JobInputError, job_cancel, job_retry, job_run_now
from tasksapp.graphs.models import GraphRun
from tasksapp.graphs.selectors import graph_run_id_for_job
from tasksapp.graphs.services import GraphInputError, graph_cancel
from tasksapp.recurring.models import Member, RecurringTask
from tasksapp.recurring.services import (
    PlanningInputError,
    member_activate,
    member_deactivate,
    recurring_task_update,
)
from tasksapp.web.models import ApiToken, OperatorAction
from tasksapp.web.tokens import TokenInputError, api_token_issue, api_token_revoke

ROLE_VIEWER = "viewer"
ROLE_OPERATOR = "operator"
PERM_VIEW = "tasksapp.view_dashboard"
PERM_OPERATE = "tasksapp.operate"
_MODELS = [
    "job",
    "member",
    "recurringtask",
    "sliceplan",
    "dispatcher",
    "dispatchercounter",
    "workerprocess",
    "freeordinal",
    "operatoraction",
    "apitoken",
    "jobqueue",
    "routingmode",
]
# Viewers see everything; operators may also act. Superusers have every permission.
ROLES = {
    ROLE_VIEWER: ["view_dashboard", *[f"view_{m}" for m in _MODELS]],
    ROLE_OPERATOR: ["view_dashboard", "operate", *[f"view_{m}" for m in _MODELS]],
}

ERR_NOT_OPERATOR = "only operators may do this: {user} is not in the operator group."
ERR_TASK_NOT_FOUND = "recurring task {task_id} does not exist."
ERR_NOT_A_GRAPH = "job {job_id} belongs to no graph."
DENIED = "denied:"  # the action prefix of a refused attempt
REFUSAL_PATH_MAX = 500

logger = logging.getLogger(__name__)


class OperatorPermissionError(PermissionError):
    """The user may look but not act."""


# What an action may be refused with; every entry point shows the message to the operator.
ACTION_REFUSALS = (JobInputError, PlanningInputError, TokenInputError, OperatorPermissionError)


def roles_ensure() -> None:
    """Create the groups and give them their permissions (migration 0006 does it on
    install; tests call it after a database flush)."""
    for name, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="tasksapp", codename__in=codenames)
        )


def operator_action_record(
    *,
    user: Any,
    via: str,
    action: str,
    target_type: str,
    target_id: Any,
    details: dict | None = None,
    username: str | None = None,
) -> OperatorAction:
    """One audit row. `username` defaults to the user's (a command passes its own)."""
    return OperatorAction.objects.create(
        user=user if getattr(user, "pk", None) else None,
        username=username if username is not None else getattr(user, "username", "") or "",
        via=via,
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        details=details or {},
    )


def operator_refusal_record(
    *,
    user: Any,
    via: str,
    action: str,
    target_type: str,
    target_id: Any = "",
    method: str = "POST",
    path: str = "",
    reason: str = "",
    details: dict | None = None,
) -> OperatorAction | None:
    """Record an attempt refused for want of a role: action `denied:<action>`, with the
    request's method, path and the reason in the details. Nothing is recorded for an
    anonymous user (see the module's docstring)."""
    if not (user and getattr(user, "is_authenticated", False)):
        return None
    logger.info("refused %s %s to %s (%s)", method, action, user.get_username(), via)
    return operator_action_record(
        user=user,
        via=via,
        action=(DENIED + action)[:40],
        target_type=target_type[:40],
        target_id=str(target_id)[:200],
        details={"method": method, "path": path[:REFUSAL_PATH_MAX], "reason": reason}
        | (details or {}),
    )


def _require_operator(user: Any) -> None:
    if not (user and user.is_authenticated and user.has_perm(PERM_OPERATE)):
        raise OperatorPermissionError(ERR_NOT_OPERATOR.format(user=user or "anonymous"))


def _job_audited(service, action: str, *, user: Any, job_id: int, via: str, **options: Any) -> Job:
    _require_operator(user)
    with transaction.atomic():
        before = Job.objects.filter(id=job_id).values_list("state", "run_at").first()
        job = service(job_id=job_id, **options)
        details = {"state_before": before[0] if before else None, "state_after": job.state}
        if job.cancel_requested_at is not None and job.state != "cancelled":
            details["cancel_requested_at"] = job.cancel_requested_at.isoformat()
        if before and job.run_at != before[1]:
            details["run_at_before"] = before[1].isoformat()
            details["run_at_after"] = job.run_at.isoformat()
        operator_action_record(
            user=user, via=via, action=action, target_type="job", target_id=job.id, details=details
        )
    return job


def job_cancel_audited(*, user: Any, job_id: int, via: str) -> Job:
    """scheduled|failed → cancelled; claimed|running: cancel requested (job_cancel),
    recorded."""
    return _job_audited(job_cancel, "cancel", user=user, job_id=job_id, via=via)


def job_retry_audited(
    *, user: Any, job_id: int, via: str, run_at: dt.datetime | None = None
) -> Job:
    """dead|lost|cancelled|failed → scheduled at `run_at`, default now (job_retry), recorded."""
    return _job_audited(job_retry, "retry", user=user, job_id=job_id, via=via, run_at=run_at)


def job_run_now_audited(*, user: Any, job_id: int, via: str) -> Job:
    """A waiting job's run time moved to now (job_run_now), recorded."""
    return _job_audited(job_run_now, "run_now", user=user, job_id=job_id, via=via)


def graph_cancel_audited(*, user: Any, job_id: int, via: str) -> GraphRun:
    """Cancel the graph job `job_id` belongs to (as its graph job or one of its task
    jobs): graph_cancel, recorded against the graph."""
    _require_operator(user)
    with transaction.atomic():
        graph_run_id = graph_run_id_for_job(job_id=job_id)
        if graph_run_id is None:
            raise GraphInputError(ERR_NOT_A_GRAPH.format(job_id=job_id))
        before = GraphRun.objects.filter(id=graph_run_id).values_list("state", flat=True).first()
        graph = graph_cancel(graph_run_id=graph_run_id)
        operator_action_record(
            user=user,
            via=via,
            action="cancel_graph",
            target_type="graph",
            target_id=graph.id,
            details={"job_id": job_id, "state_before": before, "state_after": graph.state},
        )
    return graph


def _task_active_audited(*, user: Any, task_id: int, via: str, active: bool) -> RecurringTask:
    _require_operator(user)
    with transaction.atomic():
        task = RecurringTask.objects.filter(id=task_id).first()
        if task is None:
            raise PlanningInputError(ERR_TASK_NOT_FOUND.format(task_id=task_id))
        was = task.active
        task = recurring_task_update(task=task, active=active)
        operator_action_record(
            user=user,
            via=via,
            action="resume" if active else "pause",
            target_type="recurring_task",
            target_id=task.id,
            details={"name": task.name, "active_before": was, "active_after": task.active},
        )
    return task


def recurring_task_pause_audited(*, user: Any, task_id: int, via: str) -> RecurringTask:
    """Stop planning the task (jobs already planned still run), recorded."""
    return _task_active_audited(user=user, task_id=task_id, via=via, active=False)


def recurring_task_resume_audited(*, user: Any, task_id: int, via: str) -> RecurringTask:
    """Plan the task again from its next slice, recorded."""
    return _task_active_audited(user=user, task_id=task_id, via=via, active=True)


def _member_audited(service, action: str, *, user: Any, member: Member, via: str) -> Member:
    _require_operator(user)
    with transaction.atomic():
        was = member.active
        member = service(member=member)
        operator_action_record(
            user=user,
            via=via,
            action=action,
            target_type="member",
            target_id=member.external_id,
            details={"active_before": was, "active_after": member.active},
        )
    return member


def member_deactivate_audited(*, user: Any, member: Member, via: str) -> Member:
    """Stop planning the member and cancel its waiting jobs (member_deactivate), recorded."""
    return _member_audited(member_deactivate, "deactivate", user=user, member=member, via=via)


def member_activate_audited(*, user: Any, member: Member, via: str) -> Member:
    """Plan the member again (member_activate), recorded."""
    return _member_audited(member_activate, "activate", user=user, member=member, via=via)


@sensitive_variables("key")  # kept out of error reports
def api_token_create_audited(*, user: Any, owner: Any, name: str, via: str) -> tuple[ApiToken, str]:
    """A new API token for `owner`, created by an operator, recorded (never its key).
    Returns the token and its key: show the key once, then forget it."""
    _require_operator(user)
    with transaction.atomic():
        token, key = api_token_issue(owner=owner, name=name, created_by=user)
        operator_action_record(
            user=user,
            via=via,
            action="token_create",
            target_type="api_token",
            target_id=token.id,
            details={"name": token.name, "owner": owner.get_username(), "prefix": token.prefix},
        )
    return token, key


def api_token_revoke_audited(*, user: Any, token_id: Any, via: str) -> ApiToken:
    """Revoke an API token (it stops working at once), recorded."""
    _require_operator(user)
    with transaction.atomic():
        token = api_token_revoke(token_id=token_id)
        operator_action_record(
            user=user,
            via=via,
            action="token_revoke",
            target_type="api_token",
            target_id=token.id,
            details={
                "name": token.name,
                "owner": token.user.get_username(),
                "prefix": token.prefix,
            },
        )
    return token


def _queue_settings(queue: JobQueue | None) -> dict[str, Any]:
    if queue is None:
        return {}
    fields = ("paused", "concurrency_limit", "key_concurrency_limit", "rate_limit", "rate_period")
    return {field: getattr(queue, field) for field in fields}


def queue_configure_audited(
    *, user: Any, name: Any, via: str, action: str = "queue_configure", **settings: Any
) -> JobQueue:
    """Change a queue's settings (queue_configure: pause, resume, limits), recorded with
    the settings before and after."""
    _require_operator(user)
    with transaction.atomic():
        before = _queue_settings(JobQueue.objects.filter(name=name).first())
        queue = queue_configure(name=name, **settings)
        operator_action_record(
            user=user,
            via=via,
            action=action,
            target_type="queue",
            target_id=queue.name,
            details={"before": before, "after": _queue_settings(queue)},
        )
    return queue


def queue_pause_audited(*, user: Any, name: Any, via: str) -> JobQueue:
    """Dispatchers stop claiming the queue (running jobs finish), recorded."""
    return queue_configure_audited(user=user, name=name, via=via, action="queue_pause", paused=True)


def queue_resume_audited(*, user: Any, name: Any, via: str) -> JobQueue:
    """Dispatchers claim the queue again, recorded."""
    return queue_configure_audited(
        user=user, name=name, via=via, action="queue_resume", paused=False
    )


def routing_degrade_audited(
    *, user: Any, via: str, reason: Any, critical_priority: Any = MAX_PRIORITY
) -> RoutingMode:
    """Degraded mode on (only critical jobs are claimed), recorded."""
    _require_operator(user)
    with transaction.atomic():
        mode = routing_degrade(reason=reason, critical_priority=critical_priority)
        operator_action_record(
            user=user,
            via=via,
            action="degrade",
            target_type="routing",
            target_id="mode",
            details={"reason": mode.reason, "critical_priority": mode.critical_priority},
        )
    return mode


def routing_restore_audited(*, user: Any, via: str) -> RoutingMode:
    """Degraded mode off (the rest is claimed again, highest priority first), recorded."""
    _require_operator(user)
    with transaction.atomic():
        was = RoutingMode.objects.filter(id=1).values_list("reason", flat=True).first()
        mode = routing_restore()
        operator_action_record(
            user=user,
            via=via,
            action="restore",
            target_type="routing",
            target_id="mode",
            details={"reason_before": was or ""},
        )
    return mode


# The action each audited service records: entry points name refused attempts the same.
SERVICE_ACTIONS = {
    job_cancel_audited: "cancel",
    job_retry_audited: "retry",
    job_run_now_audited: "run_now",
    graph_cancel_audited: "cancel_graph",
    recurring_task_pause_audited: "pause",
    recurring_task_resume_audited: "resume",
    member_deactivate_audited: "deactivate",
    member_activate_audited: "activate",
    api_token_create_audited: "token_create",
    api_token_revoke_audited: "token_revoke",
    queue_configure_audited: "queue_configure",
    queue_pause_audited: "queue_pause",
    queue_resume_audited: "queue_resume",
    routing_degrade_audited: "degrade",
    routing_restore_audited: "restore",
}
