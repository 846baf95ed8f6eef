"""Dashboard pages of schedules: the list, and one schedule with its next fire times (in
its zone and in UTC), its cron in words and its last runs with their state and lag.
Actions (pause, resume, run now, delete): POST, operator role, one audited service."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from tasksapp.schedules.models import Schedule
from tasksapp.schedules.selectors import (
    schedule_in_words,
    schedule_list,
    schedule_next_fires,
    schedule_runs,
)
from tasksapp.schedules.services import ScheduleInputError
from tasksapp.web.dashboard.access import operator_required, viewer_required
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import ACTION_REFUSALS, PERM_OPERATE
from tasksapp.web.schedule_operators import (
    schedule_delete_audited,
    schedule_pause_audited,
    schedule_resume_audited,
    schedule_run_now_audited,
)

VIA = OperatorAction.Via.DASHBOARD
NEXT_FIRES = 10
LAST_RUNS = 20
ACTIONS = {
    "pause": (schedule_pause_audited, "{changed.name} paused: its waiting runs are cancelled."),
    "resume": (schedule_resume_audited, "{changed.name} resumed."),
    "run-now": (schedule_run_now_audited, "Run now: job {changed.job_id}."),
    "delete": (schedule_delete_audited, "{changed[name]} deleted."),
}


@login_required
@viewer_required
@require_GET
def schedule_list_page(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    rows = [
        {
            "schedule": schedule,
            "in_words": schedule_in_words(schedule=schedule),
            "next": next(iter(schedule_next_fires(schedule=schedule, after=now, count=1)), None),
        }
        for schedule in schedule_list()
    ]
    return render(request, "dashboard/schedule_list.html", {"rows": rows})


@login_required
@viewer_required
@require_GET
def schedule_detail_page(request: HttpRequest, schedule_id: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule, id=schedule_id)
    context = {
        "schedule": schedule,
        "in_words": schedule_in_words(schedule=schedule),
        "fires": schedule_next_fires(schedule=schedule, after=timezone.now(), count=NEXT_FIRES),
        "runs": schedule_runs(schedule=schedule, limit=LAST_RUNS),
        "can_operate": request.user.has_perm(PERM_OPERATE),
    }
    return render(request, "dashboard/schedule_detail.html", context)


@login_required
@operator_required
@require_POST
def schedule_action(request: HttpRequest, schedule_id: int, action: str) -> HttpResponse:
    if action not in ACTIONS:
        raise Http404(f"no action {action!r}")
    service, done = ACTIONS[action]
    try:
        changed = service(user=request.user, schedule_id=schedule_id, via=VIA)
        messages.success(request, done.format(changed=changed))
    except (*ACTION_REFUSALS, ScheduleInputError) as exc:
        messages.error(request, str(exc))
        return redirect(reverse("dashboard:schedule-list"))
    if action == "delete":
        return redirect(reverse("dashboard:schedule-list"))
    return redirect(reverse("dashboard:schedule-detail", args=[schedule_id]))
