from rest_framework.permissions import SAFE_METHODS, BasePermission

from tasksapp.recurring.models import Member
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import PERM_OPERATE, PERM_VIEW, operator_refusal_record

REASON_OPERATE = "needs the operator role"
ROUTING_TARGET = "mode"
# What a write to each API URL (by name) attempts, for the record of a refused one:
# (action, target type, URL argument naming the target; without one the record names the
# URL, operators.py). The actions are the audited ones' names where there is one.
API_WRITES = {
    "jobs": ("job_create", "job", None),
    "job-cancel": ("cancel", "job", "job_id"),
    "job-retry": ("retry", "job", "job_id"),
    "job-run-now": ("run_now", "job", "job_id"),
    "jobs-bulk": ("bulk_action", "jobs", None),
    "jobs-bulk-create": ("job_create_many", "job", None),
    "graph-jobs": ("graph_job_create", "job", None),
    "graph-job-cancel": ("cancel_graph", "job", "job_id"),
    "members": ("member_create", "member", None),
    "members-batch": ("members_batch", "members", None),
    "member-deactivate": ("deactivate", "member", "member_id"),
    "member-activate": ("activate", "member", "member_id"),
    "tasks": ("recurring_task_create", "recurring_task", None),
    "task-pause": ("pause", "recurring_task", "task_id"),
    "task-resume": ("resume", "recurring_task", "task_id"),
    "queue": ("queue_configure", "queue", "name"),
    "queue-pause": ("queue_pause", "queue", "name"),
    "queue-resume": ("queue_resume", "queue", "name"),
    "routing-degrade": ("degrade", "routing", None),
    "routing-restore": ("restore", "routing", None),
    "schedules": ("schedule_create", "schedule", None),
    "schedule": ("schedule_edit", "schedule", "schedule_id"),
    "schedule-pause": ("schedule_pause", "schedule", "schedule_id"),
    "schedule-resume": ("schedule_resume", "schedule", "schedule_id"),
    "schedule-run-now": ("schedule_run_now", "schedule", "schedule_id"),
}
# A URL whose methods are different actions: (URL name, method) -> as above.
API_WRITES_BY_METHOD = {("schedule", "DELETE"): ("schedule_delete", "schedule", "schedule_id")}


class ViewOrOperate(BasePermission):
    """Reads need the viewer permission; writes the operator permission. A write refused
    to a logged-in user is recorded (`denied:<action>`, operators.py)."""

    message = "you need the viewer role to read and the operator role to write."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        safe = request.method in SAFE_METHODS
        if user.has_perm(PERM_VIEW if safe else PERM_OPERATE):
            return True
        if not safe:
            api_refusal_record(request)
        return False


def api_refusal_record(request) -> None:
    match = request.resolver_match
    name = match.url_name if match else ""
    kwargs = match.kwargs if match else {}
    action, target_type, argument = API_WRITES_BY_METHOD.get(
        (name, request.method)
    ) or API_WRITES.get(name, (name or "write", "url", None))
    target_id = kwargs.get(argument, "") if argument else ""
    if target_type == "routing":
        target_id = ROUTING_TARGET  # as the audited actions name it
    if target_type == "member" and target_id != "":
        # Member actions are recorded by external id; the URL has the row's id.
        external_id = Member.objects.filter(id=target_id).values_list("external_id", flat=True)
        target_id = external_id.first() or f"id {target_id}"
    operator_refusal_record(
        user=request.user,
        via=OperatorAction.Via.API,
        action=action,
        target_type=target_type,
        target_id=target_id,
        method=request.method,
        path=request.path,
        reason=REASON_OPERATE,
    )
