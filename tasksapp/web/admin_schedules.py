"""The admin pages of schedules (registered by TasksappConfig.ready, after admin.py): add
and edit through the audited services (a refusal shows on the form and stores nothing),
pause, resume and run now as actions, delete through schedule_delete (its waiting jobs
cancelled); the runs are read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import reverse
from django.utils.html import format_html

from tasksapp.schedules.models import Schedule, ScheduleRun
from tasksapp.schedules.services import EDITABLE, ScheduleInputError
from tasksapp.schedules.services.schedules import validated_schedule
from tasksapp.web.admin import DeclaredFiltersAdmin, OperateMixin
from tasksapp.web.forms import GuardedJSONField
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import ACTION_REFUSALS
from tasksapp.web.schedule_operators import (
    schedule_create_audited,
    schedule_delete_audited,
    schedule_pause_audited,
    schedule_resume_audited,
    schedule_run_now_audited,
    schedule_update_audited,
)

VIA = OperatorAction.Via.ADMIN
REFUSED = (*ACTION_REFUSALS, ScheduleInputError)


class ScheduleForm(forms.ModelForm):
    """Every field checked by the schedule services' own validation."""

    class Meta:
        model = Schedule
        fields = list(EDITABLE)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not self.errors:
            try:
                validated_schedule({**data, "payload": data.get("payload") or {}})
            except ScheduleInputError as exc:
                raise ValidationError(str(exc)) from exc
        return data


def _action(service, description: str, done: str, audit_action: str):
    @admin.action(description=description, permissions=["operate"])
    def action(modeladmin, request, queryset) -> None:
        ok = 0
        for schedule in queryset:
            try:
                service(user=request.user, schedule_id=schedule.pk, via=VIA)
                ok += 1
            except REFUSED as exc:
                modeladmin.message_user(request, str(exc), messages.WARNING)
        if ok:
            modeladmin.message_user(request, done.format(count=ok), messages.SUCCESS)

    action.audit_action = audit_action  # what a refused attempt is recorded as
    return action


class ScheduleRunInline(admin.TabularInline):
    model = ScheduleRun
    fields = ["fire_at", "run_at", "outcome", "job_id", "decided_at", "details"]
    readonly_fields = fields
    ordering = ["-fire_at"]
    extra = 0
    max_num = 0
    can_delete = False

    def get_queryset(self, request):
        return super().get_queryset(request).order_by("-fire_at")


@admin.register(Schedule)
class ScheduleAdmin(OperateMixin, DeclaredFiltersAdmin):
    form = ScheduleForm
    formfield_overrides = {models.JSONField: {"form_class": GuardedJSONField}}
    list_display = ["name", "handler", "cron", "every", "timezone", "active", "dashboard"]
    list_filter = ["active"]
    search_fields = ["name", "handler"]
    readonly_fields = ["planned_until", "created_at", "updated_at"]
    actions = ["pause_schedules", "resume_schedules", "run_schedules_now"]

    def save_model(self, request, obj, form, change):
        values = {name: form.cleaned_data[name] for name in EDITABLE}
        if change:
            changed = {name: values[name] for name in form.changed_data if name in EDITABLE}
            saved = schedule_update_audited(
                user=request.user, schedule_id=obj.pk, via=VIA, **changed
            )
        else:
            saved = schedule_create_audited(user=request.user, via=VIA, **values)
        obj.pk = saved.pk
        obj.refresh_from_db()

    def delete_model(self, request, obj):
        schedule_delete_audited(user=request.user, schedule_id=obj.pk, via=VIA)

    def delete_queryset(self, request, queryset):
        for schedule in queryset:
            self.delete_model(request, schedule)

    def get_inlines(self, request, obj=None):
        return [ScheduleRunInline] if obj else []

    @admin.display(description="dashboard")
    def dashboard(self, obj):
        url = reverse("dashboard:schedule-detail", args=[obj.pk])
        return format_html('<a href="{}">fire times and runs</a>', url)

    pause_schedules = _action(
        schedule_pause_audited, "Pause selected schedules", "{count} paused.", "schedule_pause"
    )
    resume_schedules = _action(
        schedule_resume_audited, "Resume selected schedules", "{count} resumed.", "schedule_resume"
    )
    run_schedules_now = _action(
        schedule_run_now_audited,
        "Run selected schedules now",
        "{count} run(s) added.",
        "schedule_run_now",
    )
