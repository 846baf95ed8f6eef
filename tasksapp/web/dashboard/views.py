"""Dashboard pages. Each view: check the role, parse the query, call selectors, render.
Actions: POST only (CSRF by the middleware), operator permission (a refusal is recorded,
access.py), one audited service, then back to the page with a message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_GET, require_POST

from tasksapp.engine.models import JobState
from tasksapp.engine.options import MAX_PRIORITY
from tasksapp.engine.settings import tempo_settings
from tasksapp.graphs.models import GraphState
from tasksapp.graphs.selectors import graph_run_page
from tasksapp.recurring.models import RecurringTask
from tasksapp.recurring.selectors.plans import (
    member_runs_for_task,
    recurring_task_list,
    recurring_task_plan,
)
from tasksapp.web.dashboard import bulk
from tasksapp.web.dashboard import query as params
from tasksapp.web.dashboard.access import operator_required, viewer_required
from tasksapp.web.dashboard.graph_svg import graph_drawing
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import (
    ACTION_REFUSALS,
    PERM_OPERATE,
    graph_cancel_audited,
    job_cancel_audited,
    job_retry_audited,
    job_run_now_audited,
    queue_pause_audited,
    queue_resume_audited,
    recurring_task_pause_audited,
    recurring_task_resume_audited,
    routing_degrade_audited,
    routing_restore_audited,
)
from tasksapp.web.selectors.dashboard import dashboard_overview, job_history_by_day
from tasksapp.web.selectors.health import health_read
from tasksapp.web.selectors.jobs import (
    SEARCH_WINDOW,
    JobFilterError,
    JobFilters,
    job_get,
    job_graph,
    job_page,
    job_timeline,
    text_indexed,
)
from tasksapp.web.selectors.queues import queue_list, routing_state

VIA = OperatorAction.Via.DASHBOARD
# Each action's audited service, and what to say with the object it changed.
JOB_ACTIONS = {
    "cancel": (job_cancel_audited, "Job {changed.id} cancelled."),
    "retry": (job_retry_audited, "Job {changed.id} scheduled again, to run now."),
    "run-now": (job_run_now_audited, "Job {changed.id} will run now."),
    "cancel-graph": (graph_cancel_audited, "Graph {changed.id} is {changed.state}."),
}
TASK_ACTIONS = {
    "pause": (recurring_task_pause_audited, "{changed.name} paused: no new slices are planned."),
    "resume": (recurring_task_resume_audited, "{changed.name} resumed."),
}
QUEUE_ACTIONS = {
    "pause": (queue_pause_audited, "Queue {changed.name} paused: its running jobs finish."),
    "resume": (queue_resume_audited, "Queue {changed.name} resumed."),
}
ROUTING_ACTIONS = {
    "degrade": (routing_degrade_audited, "Degraded mode on: only critical jobs are claimed."),
    "restore": (routing_restore_audited, "Degraded mode off: every job is claimed again."),
}
AUDIT_PAGE = 100
PLAIN_TEXT = "text/plain; charset=utf-8"
ERR_GRAPH_STATE = "state must be one of: {choices}."


def _can_operate(request: HttpRequest) -> bool:
    return request.user.has_perm(PERM_OPERATE)


@login_required
@viewer_required
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    data = _with_colors(dashboard_overview())
    return render(request, "tempo/dashboard/overview.html", {"data": data, "health": health_read()})


def _with_colors(data: dict[str, Any]) -> dict[str, Any]:
    """One colour per live dispatcher, the same on its row and on its partitions."""
    index = {d["name"]: i for i, d in enumerate(d for d in data["dispatchers"] if d["alive"])}
    for row in data["dispatchers"]:
        row["color_index"] = index.get(row["name"], 0)
    for row in data["partitions"]:
        row["color_index"] = index.get(row["owner"], 0)
    return data


@login_required
@viewer_required
@require_GET
def overview_data(request: HttpRequest) -> JsonResponse:
    return JsonResponse(dashboard_overview())


@login_required
@viewer_required
@require_GET
def recurring_list(request: HttpRequest) -> HttpResponse:
    return render(request, "tempo/dashboard/recurring_list.html", {"rows": recurring_task_list()})


@login_required
@viewer_required
@require_GET
def recurring_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    task = get_object_or_404(RecurringTask, id=task_id)
    errors: list[str] = []
    period = _checked(errors, params.plan_period, request.GET, task)
    external_id = _checked(errors, params.text, request.GET, "member") or ""
    _show(request, errors)
    view = recurring_task_plan(task=task, period=period)
    member, runs = (
        member_runs_for_task(task=task, external_id=external_id) if external_id else (None, [])
    )
    context = {
        "task": task,
        "view": view,
        "chart": {
            **_plan_chart(view),
            "history": job_history_by_day(now=view.now, task_id=task.id),
        },
        "member_query": external_id,
        "member": member,
        "member_runs": runs,
        "can_operate": _can_operate(request),
    }
    return render(request, "tempo/dashboard/recurring_detail.html", context, status=_status(errors))


def _plan_chart(view) -> dict[str, Any]:
    """The plan page's chart data, JSON-ready."""
    return {
        "slices": [
            {
                "index": s.index,
                "label": s.starts_at.strftime("%m-%d %H:%M"),
                "planned": s.planned,
                "current": s.current,
                "members": s.members,
                "expected": round(s.expected, 2),
                "jobs_planned": s.jobs_planned,
            }
            for s in view.slices
        ],
        "load": {
            "labels": [t.strftime("%m-%d %H:%M") for t in view.load_starts],
            "counts": view.load_counts,
            "planned": view.load_planned,
            "mean": view.load_mean,
        },
        "period_start": view.period_start.isoformat(),
        "period_end": view.period_end.isoformat(),
        "now": view.now.isoformat(),
    }


def _checked(errors: list[str], read: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A query parameter read by `read` (tasksapp/web/dashboard/query.py); when it is
    refused, its message goes to `errors` and None comes back."""
    try:
        return read(*args, **kwargs)
    except params.BadQuery as exc:
        errors.append(str(exc))
        return None


def _show(request: HttpRequest, errors: list[str]) -> None:
    for error in errors:
        messages.error(request, error)


def _status(errors: list[str]) -> int:
    """A page whose query had a refused parameter answers 400 (shown without it)."""
    return 400 if errors else 200


@login_required
@viewer_required
@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    filters, errors = params.job_filters(request.GET)
    cursor = _checked(errors, params.text, request.GET, "cursor")
    page = None
    if not errors:
        try:
            page = job_page(filters=filters, cursor=cursor or None)
        except JobFilterError as exc:
            errors.append(str(exc))
    query = request.GET.copy()
    query.pop("cursor", None)
    context = {
        "page": page,
        "errors": errors,
        "search_window": SEARCH_WINDOW,
        # A text of three letters or digits in a row is found through the indexes among
        # all jobs; a shorter one only in a window of the latest.
        "text_windowed": bool(filters and filters.text and not text_indexed(filters.text)),
        "priorities": range(MAX_PRIORITY, -1, -1),
        "states": JobState.values,
        "tasks": RecurringTask.objects.order_by("name").only("id", "name"),
        "query": request.GET,
        "base_query": query.urlencode(),
        "can_operate": _can_operate(request),
        "filtered": any(request.GET.get(k) for k in request.GET if k != "cursor"),
        "bulk_fields": params.job_filter_fields(request.GET),
        "bulk_filter_refused": _bulk_refusal(filters) if not errors else "",
    }
    return render(request, "tempo/dashboard/job_list.html", context, status=_status(errors))


def _bulk_refusal(filters: JobFilters) -> str:
    """Why the list's filters cannot choose the jobs of a bulk action ("": they can)."""
    try:
        bulk.service_filter(filters)
    except bulk.BulkInputError as exc:
        return str(exc)
    return ""


@login_required
@viewer_required
@require_GET
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_get(job_id=job_id)
    if job is None:
        raise Http404(f"job {job_id} does not exist.")
    graph = job_graph(job=job)
    if graph is not None and request.GET.get("part") == "graph":
        return render(
            request, "tempo/dashboard/graph_section.html", _graph_context(job, graph, request)
        )
    context = {
        "job": job,
        "timeline": job_timeline(job=job),
        "graph": graph,
        **(_graph_context(job, graph, request) if graph is not None else {}),
        "actions": OperatorAction.objects.filter(target_type="job", target_id=str(job.id)).order_by(
            "-at"
        )[:20],
        "can_operate": _can_operate(request),
        "can_cancel": job.state in (JobState.SCHEDULED, JobState.FAILED)
        or (job.state in (JobState.CLAIMED, JobState.RUNNING) and not job.cancel_requested_at),
        "can_run_now": job.state in (JobState.SCHEDULED, JobState.FAILED),
        "can_retry": job.state
        in (JobState.DEAD, JobState.LOST, JobState.CANCELLED, JobState.FAILED),
    }
    return render(request, "tempo/dashboard/job_detail.html", context)


GRAPH_LEGEND = ("waiting", "ready", "running", "succeeded", "failed", "skipped", "rolled_back")


def _graph_context(job, graph, request: HttpRequest) -> dict[str, Any]:
    """What the graph section of a job page shows (also fetched alone, to refresh it)."""
    return {
        "job": job,
        "graph": graph,
        "drawing": graph_drawing(graph),
        "legend": GRAPH_LEGEND,
        "can_operate": _can_operate(request),
        "can_cancel_graph": graph.cancelled_at is None and graph.state in ("pending", "running"),
    }


def _back(request: HttpRequest, default: str) -> HttpResponse:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return redirect(target)
    return redirect(default)


def _operator_action(request: HttpRequest, actions: dict, action: str, **target: Any) -> None:
    """Run the audited service `action` names on `target`; tell the operator how it went."""
    if action not in actions:
        raise Http404(f"no action {action!r}")
    service, done = actions[action]
    try:
        changed = service(user=request.user, via=VIA, **target)
        messages.success(request, done.format(changed=changed))
    except ACTION_REFUSALS as exc:
        messages.error(request, str(exc))


@login_required
@operator_required
@require_POST
def job_action(request: HttpRequest, job_id: int, action: str) -> HttpResponse:
    _operator_action(request, JOB_ACTIONS, action, job_id=job_id)
    return _back(request, reverse("dashboard:job-detail", args=[job_id]))


@login_required
@operator_required
@require_POST
def task_action(request: HttpRequest, task_id: int, action: str) -> HttpResponse:
    _operator_action(request, TASK_ACTIONS, action, task_id=task_id)
    return _back(request, reverse("dashboard:recurring-detail", args=[task_id]))


GRAPH_PAGE = 50


@login_required
@viewer_required
@require_GET
def graph_list(request: HttpRequest) -> HttpResponse:
    """Graph runs, newest first, filtered by state and by a wanted goal."""
    errors: list[str] = []
    state = _checked(errors, params.text, request.GET, "state") or None
    if state is not None and state not in GraphState.values:
        errors.append(ERR_GRAPH_STATE.format(choices=", ".join(GraphState.values)))
        state = None
    goal = _checked(errors, params.text, request.GET, "goal") or None
    before = _checked(errors, params.whole, request.GET, "before")
    _show(request, errors)
    rows = graph_run_page(state=state, goal=goal, before_id=before, limit=GRAPH_PAGE + 1)
    more = len(rows) > GRAPH_PAGE
    rows = rows[:GRAPH_PAGE]
    query = {name: value for name, value in (("state", state), ("goal", goal)) if value}
    context = {
        "rows": rows,
        "states": GraphState.values,
        "query": query,
        "base_query": urlencode(query),
        "next_before": rows[-1].id if more and rows else None,
    }
    return render(request, "tempo/dashboard/graph_list.html", context, status=_status(errors))


@login_required
@viewer_required
@require_GET
def queue_page(request: HttpRequest) -> HttpResponse:
    context = {
        "rows": queue_list(),
        "routing": routing_state(),
        "can_operate": _can_operate(request),
        "celery_prefix": tempo_settings().queue,
    }
    return render(request, "tempo/dashboard/queues.html", context)


@login_required
@operator_required
@require_POST
def queue_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    _operator_action(request, QUEUE_ACTIONS, action, name=name)
    return _back(request, reverse("dashboard:queues"))


@login_required
@operator_required
@require_POST
def routing_action(request: HttpRequest, action: str) -> HttpResponse:
    target = {}
    if action == "degrade":
        try:
            target = {
                "reason": params.text(request.POST, "reason"),
                "critical_priority": _priority_field(request.POST),
            }
        except params.BadQuery as exc:  # nothing a form sends: no page to go back to
            return HttpResponseBadRequest(str(exc), content_type=PLAIN_TEXT)
    _operator_action(request, ROUTING_ACTIONS, action, **target)
    return _back(request, reverse("dashboard:queues"))


def _priority_field(form) -> int | str:
    """A form's priority: ASCII digits as an int, anything else (a level name) as it is
    (the service checks); `²` is a digit to str.isdigit, not to int."""
    raw = params.text(form, "critical_priority") or str(MAX_PRIORITY)
    return int(raw) if params.WHOLE_RE.fullmatch(raw) else raw


@login_required
@viewer_required
@require_GET
def audit_list(request: HttpRequest) -> HttpResponse:
    actions = OperatorAction.objects.order_by("-id")
    errors: list[str] = []
    before = _checked(errors, params.whole, request.GET, "before")
    _show(request, errors)
    if before is not None:
        actions = actions.filter(id__lt=before)
    rows = list(actions[: AUDIT_PAGE + 1])
    more = len(rows) > AUDIT_PAGE
    rows = rows[:AUDIT_PAGE]
    next_before = rows[-1].id if more and rows else None
    for row in rows:
        row.link = _audit_link(row)
    context = {"rows": rows, "next_before": next_before}
    return render(request, "tempo/dashboard/audit.html", context, status=_status(errors))


# Audit target types that have a page, and the page's URL name.
AUDIT_PAGES = {"job": "dashboard:job-detail", "recurring_task": "dashboard:recurring-detail"}
MAX_ID_DIGITS = 18  # below 2**63: a page the URL resolver takes


def _audit_link(row: OperatorAction) -> str:
    """The page of the row's target, or "" when it has none: any stored row is shown,
    whatever its target (several ids, none, text)."""
    name = AUDIT_PAGES.get(row.target_type)
    target = row.target_id or ""
    if name is None or not (target.isascii() and target.isdigit()):
        return ""
    if len(target) > MAX_ID_DIGITS or int(target) == 0:
        return ""
    return reverse(name, args=[int(target)])
