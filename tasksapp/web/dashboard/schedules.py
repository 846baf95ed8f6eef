"""Dashboard pages of schedules: the list, and one schedule with its next fire times (in
its zone and in UTC), its cron in words and its last runs with their state and lag.
Actions (pause, resume, run now, delete) and the form that creates or edits a schedule:
POST, operator role, one audited service; a refused input re-shows the form with the
service's message at its field and changes nothing."""

from __future__ import annotations

import datetime as dt
import functools
import re
from functools import wraps
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from tasksapp.engine.handlers import registry
from tasksapp.engine.models import Delivery
from tasksapp.engine.options import DEFAULT_PRIORITY, DEFAULT_QUEUE
from tasksapp.schedules.fire_times import FireRuleError, validated_zone
from tasksapp.schedules.models import GUARD_HANDLER, Catchup, Overlap, Schedule
from tasksapp.schedules.selectors import (
    schedule_in_words,
    schedule_list,
    schedule_next_fires,
    schedule_runs,
)
from tasksapp.schedules.services import ScheduleInputError, duration_of
from tasksapp.web.dashboard.access import (
    REASONS,
    SAFE_METHODS,
    operator_required,
    viewer_required,
)
from tasksapp.web.forms import GuardedJSONField
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import ACTION_REFUSALS, PERM_OPERATE, operator_refusal_record
from tasksapp.web.schedule_operators import (
    schedule_create_audited,
    schedule_delete_audited,
    schedule_pause_audited,
    schedule_resume_audited,
    schedule_run_now_audited,
    schedule_update_audited,
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
    context = {"rows": rows, "can_operate": request.user.has_perm(PERM_OPERATE)}
    return render(request, "tempo/dashboard/schedule_list.html", context)


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
    return render(request, "tempo/dashboard/schedule_detail.html", context)


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


# --- the form to create and edit a schedule -------------------------------------------

ERR_WHEN_FORMAT = (
    "enter a date and time such as 2026-12-01T09:00 (in the schedule's time zone), or"
    " leave it empty."
)
ERR_SECONDS = "{field} must be a number of seconds."
ERR_TOO_LARGE = "a number of seconds is too large."
DONE_CREATED = "Schedule {schedule.name} created: its fire times are planned."
DONE_EDITED = "Schedule {schedule.name} saved: the change applies from its next unplanned fire."
# A service's message names its field as the service does; the form's field.
FIELD_RE = re.compile(r"^([a-z_]+)[ .:']")
FORM_FIELDS = {"every": "every_seconds", "jitter": "jitter_seconds"}
FORM_FIELDS |= {"catchup_window": "catchup_window_seconds", "give": "cron", "a": "name"}
SECONDS = {"every_seconds": "every", "jitter_seconds": "jitter"}
SECONDS["catchup_window_seconds"] = "catchup_window"
WHEN_FORMAT = "%Y-%m-%dT%H:%M:%S"


def _number(name: str, **kwargs) -> forms.FloatField:
    """Seconds, refused as the service names the field."""
    invalid = ERR_SECONDS.format(field=name)
    return forms.FloatField(
        label=f"{name.replace('catchup', 'catch-up').replace('_', ' ')} (seconds)",
        error_messages={"invalid": invalid},
        **kwargs,
    )


class ScheduleForm(forms.Form):
    """Input as text and numbers; every rule is the schedule services' own (their
    message shown at its field), so the form accepts what the API accepts."""

    name = forms.CharField(max_length=100)
    handler = forms.CharField(max_length=200, help_text="A registered handler's name.")
    cron = forms.CharField(
        required=False, max_length=200, help_text="5 fields, or 6 with the seconds first."
    )
    every_seconds = _number("every", required=False, help_text="Or: seconds between fires.")
    timezone = forms.CharField(
        label="time zone", max_length=64, initial="UTC", help_text="An IANA zone."
    )
    start_at = forms.CharField(required=False, help_text="In the schedule's zone (optional).")
    end_at = forms.CharField(required=False, help_text="In the schedule's zone (optional).")
    jitter_seconds = _number("jitter", initial=0, help_text="Each run starts up to this late.")
    catchup = forms.ChoiceField(label="catch-up", choices=Catchup.choices, initial=Catchup.ONE)
    catchup_window_seconds = _number("catchup_window", initial=3600)
    overlap = forms.ChoiceField(choices=Overlap.choices, initial=Overlap.ALLOW)
    active = forms.BooleanField(required=False, initial=True)
    max_attempts = forms.IntegerField(label="max attempts", initial=5)
    payload = GuardedJSONField(
        required=False, initial=dict, widget=forms.Textarea(attrs={"rows": 5, "cols": 60})
    )
    queue = forms.CharField(max_length=64, initial=DEFAULT_QUEUE)
    priority = forms.IntegerField(initial=DEFAULT_PRIORITY, help_text="0 (lowest) to 9.")
    delivery = forms.ChoiceField(choices=Delivery.choices, initial=Delivery.TRANSACTIONAL)
    time_limit = _number("time_limit", required=False, help_text="Seconds per attempt.")

    def clean_timezone(self) -> str:
        try:
            validated_zone(self.cleaned_data["timezone"])
        except FireRuleError as exc:
            raise ValidationError(str(exc)) from exc
        return self.cleaned_data["timezone"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        zone = ZoneInfo(data["timezone"]) if "timezone" in data else None
        for name in ("start_at", "end_at"):
            text = (data.get(name) or "").strip()
            if not text or zone is None:
                data[name] = None
                continue
            try:
                when = dt.datetime.fromisoformat(text)
            except ValueError:
                self.add_error(name, ERR_WHEN_FORMAT)
                continue
            data[name] = when if when.tzinfo else when.replace(tzinfo=zone)
        return data

    def service_values(self) -> dict[str, Any]:
        """The fields as the schedule services take them."""
        data = dict(self.cleaned_data)
        for field, name in SECONDS.items():
            data[name] = duration_of(data.pop(field))
        data["cron"] = data["cron"].strip()
        data["payload"] = {} if data["payload"] is None else data["payload"]
        return data

    def refused(self, exc: Exception) -> None:
        """A service's refusal, at the field its message names."""
        match = FIELD_RE.match(str(exc))
        name = FORM_FIELDS.get(match.group(1), match.group(1)) if match else ""
        self.add_error(name if name in self.fields else None, str(exc))


def form_initial(schedule: Schedule) -> dict[str, Any]:
    """A schedule's fields as the form shows them (times in its zone)."""
    zone = ZoneInfo(schedule.timezone)
    initial = {name: getattr(schedule, name, None) for name in ScheduleForm.base_fields}
    for field, name in SECONDS.items():
        value = getattr(schedule, name)
        seconds = None if value is None else value.total_seconds()
        initial[field] = int(seconds) if seconds is not None and seconds.is_integer() else seconds
    for name in ("start_at", "end_at"):
        value = getattr(schedule, name)
        initial[name] = "" if value is None else value.astimezone(zone).strftime(WHEN_FORMAT)
    return initial


def operators_only(action: str):
    """403 for anyone but an operator (viewers too: the form is for acting); a refused
    POST recorded as `denied:<action>` on the schedule (a GET of the form's page is
    refused alike, and not recorded)."""

    def decorator(view):
        @wraps(view)
        def checked(request: HttpRequest, *args, **kwargs):
            if not request.user.has_perm(PERM_OPERATE):
                if request.method not in SAFE_METHODS:
                    operator_refusal_record(
                        user=request.user,
                        via=VIA,
                        action=action,
                        target_type="schedule",
                        target_id=kwargs.get("schedule_id", ""),
                        method=request.method,
                        path=request.path,
                        reason=REASONS[PERM_OPERATE],
                    )
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return checked

    return decorator


def _form_page(request, form, schedule: Schedule | None, status: int = 200) -> HttpResponse:
    context = {
        "form": form,
        "schedule": schedule,
        "handlers": [name for name in registry if name != GUARD_HANDLER],
        "zones": sorted(available_timezones() | {"UTC"}),
    }
    return render(request, "tempo/dashboard/schedule_form.html", context, status=status)


def _saved(request, form: ScheduleForm, save) -> Schedule | None:
    """The schedule saved by `save(**values)`, or None with the refusal on the form."""
    if not form.is_valid():
        return None
    try:
        return save(user=request.user, via=VIA, **form.service_values())
    except (ScheduleInputError, *ACTION_REFUSALS) as exc:
        form.refused(exc)
    except OverflowError:
        form.add_error(None, ERR_TOO_LARGE)
    return None


@login_required
@operators_only("schedule_create")
@require_http_methods(["GET", "POST"])
def schedule_create_page(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _form_page(request, ScheduleForm(), None)
    form = ScheduleForm(request.POST)
    schedule = _saved(request, form, schedule_create_audited)
    if schedule is None:
        return _form_page(request, form, None, status=400)
    messages.success(request, DONE_CREATED.format(schedule=schedule))
    return redirect(reverse("dashboard:schedule-detail", args=[schedule.id]))


@login_required
@operators_only("schedule_edit")
@require_http_methods(["GET", "POST"])
def schedule_edit_page(request: HttpRequest, schedule_id: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule, id=schedule_id)
    if request.method == "GET":
        return _form_page(request, ScheduleForm(initial=form_initial(schedule)), schedule)
    form = ScheduleForm(request.POST, initial=form_initial(schedule))
    edit = functools.partial(schedule_update_audited, schedule_id=schedule.id)
    saved = _saved(request, form, edit)
    if saved is None:
        return _form_page(request, form, schedule, status=400)
    messages.success(request, DONE_EDITED.format(schedule=saved))
    return redirect(reverse("dashboard:schedule-detail", args=[saved.id]))
