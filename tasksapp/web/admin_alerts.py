"""The admin pages of alerts (registered by TasksappConfig.ready): rules are added and
edited through the alert services (a refusal shows on the form and stores nothing), and
each change is recorded in the audit log (target type `alert_rule`); incidents are
read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from tasksapp.alerts.models import AlertIncident, AlertRule
from tasksapp.alerts.services import (
    EDITABLE,
    AlertInputError,
    alert_rule_create,
    alert_rule_update,
    validated_rule,
)
from tasksapp.web.admin import DeclaredFiltersAdmin
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import operator_action_record

VIA = OperatorAction.Via.ADMIN
TARGET = "alert_rule"


class AlertRuleForm(forms.ModelForm):
    """Every field checked by the alert services' own validation."""

    class Meta:
        model = AlertRule
        fields = list(EDITABLE)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not self.errors:
            try:
                validated_rule(data)
            except AlertInputError as exc:
                raise ValidationError(str(exc)) from exc
        return data


def _record(request, action: str, rule: AlertRule, details: dict) -> None:
    operator_action_record(
        user=request.user,
        via=VIA,
        action=action,
        target_type=TARGET,
        target_id=rule.pk,
        details={"name": rule.name, **details},
    )


@admin.register(AlertRule)
class AlertRuleAdmin(DeclaredFiltersAdmin):
    form = AlertRuleForm
    list_display = ["name", "kind", "threshold", "handler", "queue", "active", "updated_at"]
    list_filter = ["kind", "active"]
    search_fields = ["name", "handler", "queue"]
    readonly_fields = ["created_at", "updated_at"]

    def save_model(self, request, obj, form, change):
        values = {name: form.cleaned_data[name] for name in EDITABLE}
        if change:
            changed = {name: values[name] for name in form.changed_data if name in EDITABLE}
            saved = alert_rule_update(rule_id=obj.pk, **changed)
            _record(request, "alert_rule_edit", saved, {"changed": sorted(changed)})
        else:
            saved = alert_rule_create(**values)
            _record(request, "alert_rule_create", saved, {"kind": saved.kind})
        obj.pk = saved.pk
        obj.refresh_from_db()

    def delete_model(self, request, obj):
        _record(request, "alert_rule_delete", obj, {"kind": obj.kind})
        obj.delete()

    def delete_queryset(self, request, queryset):
        for rule in queryset:
            self.delete_model(request, rule)


@admin.register(AlertIncident)
class AlertIncidentAdmin(DeclaredFiltersAdmin):
    list_display = ["rule", "key", "opened_at", "resolved_at", "last_notified_at", "pending"]
    list_filter = ["rule", "pending"]
    search_fields = ["key", "summary"]
    ordering = ["-opened_at"]
    readonly_fields = [f.name for f in AlertIncident._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
