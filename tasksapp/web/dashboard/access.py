"""Who may open a dashboard page or take a dashboard action.

`viewer_required` and `operator_required` refuse with 403 like Django's
`permission_required(..., raise_exception=True)`, and a refused POST (or any other
mutating method) by a logged-in user is recorded as `denied:<action>` (operators.py).
Put them under `login_required`: anonymous users are sent to the login page instead."""

from __future__ import annotations

from functools import wraps

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import PERM_OPERATE, PERM_VIEW, operator_refusal_record

SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")
REASONS = {PERM_VIEW: "needs the viewer role", PERM_OPERATE: "needs the operator role"}
# The dashboard's action URLs: what a refused POST to each attempted, on what.
# (URL name) -> (action, or None for the URL's `action` argument; target type; argument)
ACTION_URLS = {
    "job-action": (None, "job", "job_id"),
    "task-action": (None, "recurring_task", "task_id"),
    "token-create": ("token_create", "api_token", None),
    "token-revoke": ("token_revoke", "api_token", "token_id"),
    "queue-action": (None, "queue", "name"),
    "routing-action": (None, "routing", None),
    "schedule-action": (None, "schedule", "schedule_id"),
}
KNOWN_ACTIONS = {
    "cancel",
    "retry",
    "run-now",
    "pause",
    "resume",
    "cancel-graph",
    "degrade",
    "restore",
    "delete",
}
# An action argument recorded under another name: a queue's pause is `queue_pause`.
ACTION_PREFIXES = {"queue-action": "queue_", "schedule-action": "schedule_"}


def role_required(perm: str):
    def decorator(view):
        @wraps(view)
        def checked(request: HttpRequest, *args, **kwargs):
            if not request.user.has_perm(perm):
                if request.method not in SAFE_METHODS:
                    dashboard_refusal_record(request, reason=REASONS[perm])
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return checked

    return decorator


viewer_required = role_required(PERM_VIEW)
operator_required = role_required(PERM_OPERATE)


def dashboard_refusal_record(request: HttpRequest, *, reason: str) -> None:
    match = request.resolver_match
    name = match.url_name if match else ""
    kwargs = match.kwargs if match else {}
    details = {}
    if name in ACTION_URLS:
        action, target_type, argument = ACTION_URLS[name]
        if action is None:
            requested = str(kwargs.get("action", ""))
            if requested in KNOWN_ACTIONS:
                action = ACTION_PREFIXES.get(name, "") + requested.replace("-", "_")
            else:
                action = name
            if requested not in KNOWN_ACTIONS:
                details["requested"] = requested[:100]
        target_id = kwargs.get(argument, "") if argument else ""
        if target_type == "routing":
            target_id = "mode"  # as the audited actions name it
    else:  # a page: nothing to act on, but a mutating request all the same
        action, target_type, target_id = name or "page", "page", request.path
    operator_refusal_record(
        user=request.user,
        via=OperatorAction.Via.DASHBOARD,
        action=action,
        target_type=target_type,
        target_id=target_id,
        method=request.method,
        path=request.path,
        reason=reason,
        details=details,
    )
