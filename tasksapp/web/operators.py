"""Operators' actions: the roles that may take them, and every action recorded.

The dashboard, the HTTP API and the admin all call the `*_audited` functions here: each
checks the user's permission, calls the one service that owns the change, and records
who did what, when and through which entry point, in one transaction. A failed action
(wrong state, bad input) changes nothing and records nothing.

A mutating request refused for want of a role (a viewer's retry, an API write by a user
in no group, an admin action the user may not take) changes nothing and is recorded by
`operator_refusal_record` as `denied:<action>`, when the user is logged in. Anonymous
requests are not recorded: they are refused before anything runs (login page, 401), so
recording them would let anyone grow the table; throttling bounds them instead. A user's
refusals are recorded up to REFUSALS_RECORDED_PER_MINUTE a minute; the ones past that
are counted (in the cache) and the count is on the user's next recorded refusal
(`unrecorded_before`), so a client retrying in a loop cannot grow the table either.

Every row names its target: a refusal with no object in its URL names the URL
(`target_type` "url"). An action taken with an API token records which one
(`details["token"]`: its id and key prefix; see `acting_token`).
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
import time
from typing import Any

from django.contrib.auth.models import Group, Permission
from django.core.cache import cache
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
from tasksapp.web.transactions import audited_atomic

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
    "schedule",
    "schedulerun",
    "alertrule",
    "alertincident",
]
# Viewers see everything; operators may also act. Superusers have every permission.
ROLES = {
    ROLE_VIEWER: ["view_dashboard", *[f"view_{m}" for m in _MODELS]],
    ROLE_OPERATOR: ["view_dashboard", "operate", *[f"view_{m}" for m in _MODELS]],
}

ERR_NOT_OPERATOR = "only operators may do this: {user} is not in the operator group."
ERR_TASK_NOT_FOUND = "recurring task {task_id} does not exist."
ERR_NOT_A_GRAPH = "job {job_id} belongs to no graph."
ERR_AUDIT_TARGET = "an audit record needs a target type and a target id."
ERR_TOKEN_NOT_YOURS = "API token {token} belongs to {owner}: only a superuser may revoke it."
ERR_TOKEN_FOR_OTHER = "user: only a superuser may create a token for another user ({owner})."
DENIED = "denied:"  # the action prefix of a refused attempt
REFUSAL_PATH_MAX = 500
TARGET_URL = "url"  # the target type of a refusal with no object in its URL
# A user's refused attempts recorded a minute at most; the others are counted.
REFUSALS_RECORDED_PER_MINUTE = 10
REFUSAL_COUNT_KEY = "tempo:refusals:{user}:{minute}"
REFUSALS_UNRECORDED_KEY = "tempo:refusals-unrecorded:{user}"
REFUSALS_UNRECORDED_TTL = 7 * 24 * 3600
# The API token the current request authenticated with (None: a session, a command).
# Set by the API's views for the length of one request (tasksapp/web/api/views.py).
acting_token: contextvars.ContextVar[ApiToken | None] = contextvars.ContextVar(
    "acting_token", default=None
)

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
    """One audit row. `username` defaults to the user's (a command passes its own). An
    action taken with an API token names it (`details["token"]`). A row without a
    target is refused (ValueError): every row can be shown and linked."""
    target_id = "" if target_id is None else str(target_id)
    if not target_type or not target_id:
        raise ValueError(ERR_AUDIT_TARGET)
    details = dict(details or {})
    token = acting_token.get()
    if token is not None:
        details.setdefault("token", {"id": token.pk, "prefix": token.prefix})
    return OperatorAction.objects.create(
        user=user if getattr(user, "pk", None) else None,
        username=username if username is not None else getattr(user, "username", "") or "",
        via=via,
        action=action,
        target_type=target_type,
        target_id=target_id,
        details=details,
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
    request's method, path and the reason in the details. Without an object to name,
    the target is the URL. Nothing is recorded for an anonymous user, nor past the
    user's REFUSALS_RECORDED_PER_MINUTE (see the module's docstring)."""
    if not (user and getattr(user, "is_authenticated", False)):
        return None
    logger.info("refused %s %s to %s (%s)", method, action, user.get_username(), via)
    unrecorded = _refusals_over_the_rate(user)
    if unrecorded is None:
        return None
    target_id = "" if target_id is None else str(target_id)
    if not target_id:
        target_type, target_id = TARGET_URL, path or "?"
    extra = {"unrecorded_before": unrecorded} if unrecorded else {}
    return operator_action_record(
        user=user,
        via=via,
        action=(DENIED + action)[:40],
        target_type=target_type[:40],
        target_id=target_id[:200],
        details={"method": method, "path": path[:REFUSAL_PATH_MAX], "reason": reason}
        | (details or {})
        | extra,
    )


def _refusals_over_the_rate(user: Any) -> int | None:
    """None when the user's refusals this minute are past the rate (this one is then
    counted as unrecorded); else how many went unrecorded before it (and the count
    starts again)."""
    minute = int(time.time() // 60)
    key = REFUSAL_COUNT_KEY.format(user=user.pk, minute=minute)
    unrecorded_key = REFUSALS_UNRECORDED_KEY.format(user=user.pk)
    if _counted(key, timeout=120) > REFUSALS_RECORDED_PER_MINUTE:
        _counted(unrecorded_key, timeout=REFUSALS_UNRECORDED_TTL)
        return None
    unrecorded = cache.get(unrecorded_key) or 0
    if unrecorded:
        cache.delete(unrecorded_key)
    return unrecorded


def _counted(key: str, *, timeout: int) -> int:
    """Add one to the cache's count `key` (made with `timeout` when missing)."""
    cache.add(key, 0, timeout=timeout)
    try:
        return cache.incr(key)
    except ValueError:  # expired between the two calls
        cache.add(key, 1, timeout=timeout)
        return 1


def _require_operator(user: Any) -> None:
    if not (user and user.is_authenticated and user.has_perm(PERM_OPERATE)):
        raise OperatorPermissionError(ERR_NOT_OPERATOR.format(user=user or "anonymous"))


def _job_audited(service, action: str, *, user: Any, job_id: int, via: str, **options: Any) -> Job:
    _require_operator(user)
    with audited_atomic():
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
    with audited_atomic():
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
    with audited_atomic():
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
    with audited_atomic():
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
    """A new API token for `owner`, created by an operator for themselves (a superuser
    for anyone), recorded (never its key). Returns the token and its key: show the key
    once, then forget it."""
    _require_operator(user)
    if not user.is_superuser and getattr(owner, "pk", None) != user.pk:
        raise TokenInputError(ERR_TOKEN_FOR_OTHER.format(owner=owner.get_username()))
    with audited_atomic():
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
    """Revoke an API token (it stops working at once), recorded. An operator revokes
    their own tokens; a superuser anyone's."""
    _require_operator(user)
    with audited_atomic():
        token = api_token_revoke(token_id=token_id, revoker_check=_token_revoker_check(user))
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


def _token_revoker_check(user: Any):
    """The check api_token_revoke runs on the locked token: refused unless `user` owns
    it or is a superuser."""

    def check(token: ApiToken) -> None:
        if not user.is_superuser and token.user_id != user.pk:
            owner = token.user.get_username()
            raise TokenInputError(ERR_TOKEN_NOT_YOURS.format(token=token, owner=owner))

    return check


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
    with audited_atomic():
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
    with audited_atomic():
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
    with audited_atomic():
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
