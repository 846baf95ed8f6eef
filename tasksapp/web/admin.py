"""Django admin for developers: every model, machine-written data read-only, and every
change that has a service made through it (admin actions and saves are adapters)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import flatten_fieldsets
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import connections, models
from django.urls import NoReverseMatch, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html

from tasksapp.engine.db import on_postgres
from tasksapp.engine.handlers import registry as handler_registry
from tasksapp.engine.jsonvalues import safe_json
from tasksapp.engine.models import (
    Dispatcher,
    DispatcherCounter,
    Job,
    JobQueue,
    RoutingMode,
    WorkerProcess,
)
from tasksapp.engine.options import (
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    JOB_OPTION_FIELDS,
    JobOptions,
    JobOptionsError,
    validated_handler,
    validated_payload,
    validated_retention,
)
from tasksapp.engine.queues import queue_configure, routing_degrade
from tasksapp.engine.services import JobInputError, job_schedule
from tasksapp.recurring import localtime, phases
from tasksapp.recurring.models import FreeOrdinal, Member, RecurringTask, SlicePlan
from tasksapp.recurring.services import (
    MAX_MEMBER_IDS,
    PlanningInputError,
    member_create,
    member_delete,
    member_delete_many,
    recurring_task_create,
    recurring_task_update,
)
from tasksapp.web.forms import GuardedJSONField
from tasksapp.web.models import ApiToken, OperatorAction
from tasksapp.web.operators import (
    ACTION_REFUSALS,
    PERM_OPERATE,
    SERVICE_ACTIONS,
    api_token_revoke_audited,
    graph_cancel_audited,
    job_cancel_audited,
    job_retry_audited,
    job_run_now_audited,
    member_activate_audited,
    member_deactivate_audited,
    operator_action_record,
    operator_refusal_record,
    queue_configure_audited,
    queue_pause_audited,
    queue_resume_audited,
    recurring_task_pause_audited,
    recurring_task_resume_audited,
    routing_degrade_audited,
    routing_restore_audited,
)
from tasksapp.web.templatetags.tempo import json_text
from tasksapp.web.transactions import audited_atomic

VIA = OperatorAction.Via.ADMIN
PLANNER_ENTRY = "tempo: plan due slices"  # migration 0004's django-celery-beat entry


class EstimatedCountPaginator(Paginator):
    """The unfiltered jobs list shows the planner's row estimate instead of counting a
    table of millions; filtered lists count exactly."""

    @cached_property
    def count(self) -> int:
        query = getattr(self.object_list, "query", None)
        db = connections[self.object_list.db] if query is not None else None
        if db is not None and on_postgres(db.alias) and not query.where:
            with db.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [self.object_list.model._meta.db_table],
                )
                estimate = cursor.fetchone()[0]
            if estimate and estimate > 10_000:
                return estimate
        return super().count


# What the audit log calls each model whose admin has operator actions.
AUDIT_TARGETS = {
    "job": "job",
    "member": "member",
    "recurringtask": "recurring_task",
    "apitoken": "api_token",
    "jobqueue": "queue",
    "routingmode": "routing",
}
REFUSED_SELECTION_MAX = 100


class OperateMixin:
    """Operator actions (`_operator_action`) for operators only. Django does not offer an
    action to a user without its permission and ignores a POST of it; such a POST is
    recorded here as a refused attempt (`denied:<action>`), and so is a POST to an add,
    change or delete page that the user's permissions refuse (`denied:add`, ...)."""

    def has_operate_permission(self, request) -> bool:
        return request.user.has_perm(PERM_OPERATE)

    def changelist_view(self, request, extra_context=None):
        if request.method == "POST" and "action" in request.POST:
            self._record_refused_action(request)
        return super().changelist_view(request, extra_context)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except PermissionDenied:
            self._record_refused_page(request, "add" if object_id is None else "change", object_id)
            raise

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except PermissionDenied:
            self._record_refused_page(request, "delete", object_id)
            raise

    def _record_refused_page(self, request, action: str, object_id) -> None:
        if request.method != "POST":
            return
        model_name = self.model._meta.model_name
        operator_refusal_record(
            user=request.user,
            via=VIA,
            action=action,
            target_type=AUDIT_TARGETS.get(model_name, model_name),
            target_id=object_id or "",
            method=request.method,
            path=request.path,
            reason=f"no permission to {action} a {self.model._meta.verbose_name}",
        )

    def _record_refused_action(self, request) -> None:
        name = request.POST["action"]
        audit_action = getattr(getattr(self, name, None), "audit_action", None)
        if audit_action is None or self.has_operate_permission(request):
            return
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)[:REFUSED_SELECTION_MAX]
        model_name = self.model._meta.model_name
        ids = [int(pk) for pk in selected if pk.isdigit() and len(pk) < 19]
        if model_name == "member":  # members are recorded by external id
            ids = list(Member.objects.filter(pk__in=ids).values_list("external_id", flat=True))
        operator_refusal_record(
            user=request.user,
            via=VIA,
            action=audit_action,
            target_type=AUDIT_TARGETS.get(model_name, model_name),
            target_id=",".join(map(str, ids)),
            method=request.method,
            path=request.path,
            reason="needs the operator role",
            details={
                "admin_action": name,
                "selected": selected,
                "select_across": request.POST.get("select_across") == "1",
            },
        )


def _operator_action(service, description: str, done: str, **ids: Callable[[Any], Any]):
    """An admin action that runs the audited `service` on each selected row, its
    arguments taken from the row by `ids`. A refused row is a warning; the others go on."""

    @admin.action(description=description, permissions=["operate"])
    def action(modeladmin, request, queryset) -> None:
        ok = 0
        for item in queryset:
            try:
                service(user=request.user, via=VIA, **{k: f(item) for k, f in ids.items()})
                ok += 1
            except ACTION_REFUSALS as exc:
                modeladmin.message_user(request, str(exc), messages.WARNING)
        if ok:
            modeladmin.message_user(request, done.format(count=ok), messages.SUCCESS)

    action.audit_action = SERVICE_ACTIONS[service]
    return action


# The lookups Django's field filters put in a list's address (`state__exact`,
# `revoked_at__isempty`, `task__id__exact`, a date's `__gte` and `__lt`).
FILTER_LOOKUPS = {"exact", "isnull", "isempty", "id__exact", "gte", "lt"}


class DeclaredFiltersAdmin(admin.ModelAdmin):
    """A list's address filters by its declared filters (list_filter) only. Django's
    admin takes any lookup on a model's own fields from the address: `?payload__icontains=`
    reads every payload, `?handler__regex=[` is a database error. Any other is refused
    with 400 (DisallowedModelAdminLookup)."""

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        field, _, suffix = lookup.partition("__")
        declared = {spec if isinstance(spec, str) else spec[0] for spec in self.list_filter}
        if field not in declared or suffix not in FILTER_LOOKUPS:
            return False
        return super().lookup_allowed(lookup, value, request)


def _pk(obj) -> int:
    return obj.pk


def _name(obj) -> str:
    return obj.name


def _same(obj):
    return obj


class ReadOnlyAdmin(DeclaredFiltersAdmin):
    """Rows written by the engine's processes: look, never touch."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class _DryRun(Exception):
    pass


class RoutingDefaults:
    """A job option form's queue and priority may be left empty: the defaults then."""

    def _routing_optional(self) -> None:
        for name in ("queue", "priority"):
            if name in self.fields:
                self.fields[name].required = False

    def clean_queue(self) -> str:
        return self.cleaned_data.get("queue") or DEFAULT_QUEUE

    def clean_priority(self) -> int:
        priority = self.cleaned_data.get("priority")
        return DEFAULT_PRIORITY if priority is None else priority


class JobScheduleForm(RoutingDefaults, forms.ModelForm):
    """A new job, stored by job_schedule: the handler is chosen among the registered ones
    and every option is checked by the service, whose message shows on the form."""

    handler = forms.ChoiceField(choices=())

    class Meta:
        model = Job
        fields = ["handler", "run_at", "payload", *JOB_OPTION_FIELDS, "idempotency_key"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._routing_optional()
        if self.instance.pk is not None:  # a stored job's page shows every field read-only
            self.fields.pop("handler", None)
            return
        self.fields["handler"].choices = [(name, name) for name in handler_registry]
        self.fields["idempotency_key"].required = False
        self.fields["idempotency_key"].initial = None

    def schedule(self) -> Job:
        data = {k: v for k, v in self.cleaned_data.items() if k in self.Meta.fields}
        data["idempotency_key"] = data.get("idempotency_key") or None
        return job_schedule(**data)

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            with audited_atomic():  # the service's own checks, nothing kept
                self.schedule()
                raise _DryRun
        except _DryRun:
            pass
        except JobInputError as exc:
            raise ValidationError(str(exc)) from exc
        return cleaned


# A stored job's page: everything it holds, read-only, JSON values pretty-printed.
JOB_STORED_FIELDSETS = (
    (
        None,
        {
            "fields": [
                "handler",
                "state",
                ("attempts", "max_attempts"),
                ("queue", "priority"),
                "delivery",
                "idempotency_key",
            ]
        },
    ),
    (
        "Times",
        {
            "fields": [
                "run_at",
                "created_at",
                ("claimed_at", "claimed_by"),
                "started_at",
                "finished_at",
                "lease_expires_at",
                "cancel_requested_at",
            ]
        },
    ),
    ("Values", {"fields": ["payload_json", "result_json", "retry_policy_json", "time_limit"]}),
    ("Errors", {"fields": ["last_error", "errors_json", "history_json"]}),
)


def _json_block(value) -> str:
    return format_html('<pre style="white-space: pre-wrap">{}</pre>', json_text(safe_json(value)))


@admin.register(Job)
class JobAdmin(OperateMixin, DeclaredFiltersAdmin):
    """Jobs are added through job_schedule and changed only by the engine and the audited
    actions (retry, cancel, run now): a stored job's page is read-only, and jobs are not
    deleted by hand (cancel them)."""

    form = JobScheduleForm
    formfield_overrides = {models.JSONField: {"form_class": GuardedJSONField}}
    list_display = [
        "id",
        "handler",
        "state",
        "run_at",
        "started_at",
        "finished_at",
        "attempts",
        "delivery",
    ]
    list_filter = ["state", "delivery"]
    # Exact and prefix matches only: they use the indexes; a substring search would scan.
    search_fields = ["=id", "=handler", "^idempotency_key"]
    ordering = ["-id"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    actions = ["retry_jobs", "cancel_jobs", "run_jobs_now", "cancel_graphs"]

    def get_fieldsets(self, request, obj=None):
        if obj is None:  # a new job: the scheduling form
            return super().get_fieldsets(request, obj)
        return JOB_STORED_FIELDSETS

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return super().get_readonly_fields(request, obj)
        return flatten_fieldsets(JOB_STORED_FIELDSETS)

    @admin.display(description="payload")
    def payload_json(self, job: Job) -> str:
        return _json_block(job.payload)

    @admin.display(description="result")
    def result_json(self, job: Job) -> str:
        return _json_block(job.result)

    @admin.display(description="retry policy")
    def retry_policy_json(self, job: Job) -> str:
        return _json_block(job.retry_policy)

    @admin.display(description="errors (one per failed attempt)")
    def errors_json(self, job: Job) -> str:
        return _json_block(job.errors)

    @admin.display(description="history")
    def history_json(self, job: Job) -> str:
        return _json_block(job.history)

    def has_add_permission(self, request) -> bool:
        return self.has_operate_permission(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a stored job is shown read-only; its actions need `operate`

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change):
        job = form.schedule()
        obj.pk = job.pk
        operator_action_record(
            user=request.user,
            via=VIA,
            action="schedule",
            target_type="job",
            target_id=job.pk,
            details={"handler": job.handler, "run_at": job.run_at.isoformat()},
        )

    retry_jobs = _operator_action(
        job_retry_audited, "Retry selected jobs now", "{count} job(s) retried.", job_id=_pk
    )
    cancel_jobs = _operator_action(
        job_cancel_audited, "Cancel selected jobs", "{count} job(s) cancelled.", job_id=_pk
    )
    run_jobs_now = _operator_action(
        job_run_now_audited, "Run selected jobs now", "{count} job(s) due now.", job_id=_pk
    )
    cancel_graphs = _operator_action(
        graph_cancel_audited,
        "Cancel the graphs of selected graph jobs",
        "{count} graph(s) cancelled.",
        job_id=_pk,
    )


class MemberForm(forms.ModelForm):
    class Meta:
        model = Member
        fields = ["external_id"]


@admin.register(Member)
class MemberAdmin(OperateMixin, DeclaredFiltersAdmin):
    form = MemberForm
    list_display = ["external_id", "ordinal", "phase", "active", "created_at", "member_object"]
    list_filter = ["active"]
    search_fields = ["=external_id"]
    ordering = ["ordinal"]
    show_full_result_count = False
    actions = ["deactivate_members", "activate_members"]

    def get_readonly_fields(self, request, obj=None):
        # Phase and ordinal are given once, at creation; activity changes through actions.
        fixed = ["ordinal", "phase", "active", "created_at", "member_object"]
        return ["external_id", *fixed] if obj else fixed

    @admin.display(description="object")
    def member_object(self, obj):
        """The object an audience brought this member in for, linked to its admin page."""
        if obj.content_type_id is None:
            return "-"
        meta = obj.content_type
        try:
            url = reverse(f"admin:{meta.app_label}_{meta.model}_change", args=[obj.object_id])
        except NoReverseMatch:
            return f"{meta.app_label}.{meta.model} {obj.object_id}"
        return format_html(
            '<a href="{}">{}.{} {}</a>', url, meta.app_label, meta.model, obj.object_id
        )

    def save_model(self, request, obj, form, change):
        if not change:  # the service gives the ordinal and phase, and plans open slices
            created = member_create(external_id=form.cleaned_data["external_id"])
            obj.pk, obj.ordinal, obj.phase = created.pk, created.ordinal, created.phase

    def delete_model(self, request, obj):
        member_delete(member=obj)  # cancels its waiting jobs and frees its ordinal

    def delete_queryset(self, request, queryset):
        ids = list(queryset.values_list("id", flat=True))
        for start in range(0, len(ids), MAX_MEMBER_IDS):  # set-based, waiting jobs included
            member_delete_many(member_ids=ids[start : start + MAX_MEMBER_IDS])

    deactivate_members = _operator_action(
        member_deactivate_audited,
        "Deactivate selected members",
        "{count} member(s) deactivated.",
        member=_same,
    )
    activate_members = _operator_action(
        member_activate_audited,
        "Activate selected members",
        "{count} member(s) activated.",
        member=_same,
    )


class RecurringTaskForm(RoutingDefaults, forms.ModelForm):
    """Saved through recurring_task_create / _update. `clean` shows a bad job option on its
    field, with the engine's message; then it runs the service once in a transaction it
    rolls back, so the service's refusal of the schedule shows as a form error."""

    handler = forms.ChoiceField(choices=())
    phase_strategy = forms.ChoiceField(
        choices=[(s, s) for s in phases.STRATEGIES], initial=phases.GOLDEN, required=False
    )
    timezone = forms.ChoiceField(
        choices=(),
        initial=localtime.UTC_NAME,
        required=False,
        help_text="Periods of whole days follow this zone's calendar days from local "
        "midnight (23 or 25 hours across a DST change). Fixed once the task exists.",
    )

    class Meta:
        model = RecurringTask
        fields = [
            "name",
            "handler",
            "payload",
            *JOB_OPTION_FIELDS,
            "epoch",
            "period",
            "timezone",
            "slices",
            "active",
            "retention",
            "audience",
            "audience_filter",
            "phase_strategy",
        ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._routing_optional()
        if "handler" in self.fields:
            self.fields["handler"].choices = [(name, name) for name in handler_registry]
        if "timezone" in self.fields:
            zones = [localtime.UTC_NAME, *sorted(localtime.zone_names() - {localtime.UTC_NAME})]
            self.fields["timezone"].choices = [(name, name) for name in zones]

    def save_through_service(self) -> RecurringTask:
        data = {k: v for k, v in self.cleaned_data.items() if k in self.Meta.fields}
        if self.instance.pk is None:
            data["phase_strategy"] = data.get("phase_strategy") or phases.GOLDEN
            data["timezone"] = data.get("timezone") or localtime.UTC_NAME
            return recurring_task_create(**data)
        changed = {k: v for k, v in data.items() if k in self.changed_data}
        changed.pop("name", None)  # the name is read-only once created
        return recurring_task_update(task=self.instance, **changed)

    def clean(self):
        cleaned = super().clean()
        if not self.errors:
            self._check_job_options(cleaned)
        if self.errors:
            return cleaned
        try:
            with audited_atomic():
                self.save_through_service()
                raise _DryRun
        except _DryRun:
            pass
        except PlanningInputError as exc:
            raise ValidationError(str(exc)) from exc
        return cleaned

    def _check_job_options(self, cleaned: dict) -> None:
        try:
            validated_handler(cleaned["handler"])
            JobOptions.validated(**{name: cleaned[name] for name in JOB_OPTION_FIELDS})
            validated_payload(cleaned["payload"])
            validated_retention(cleaned["retention"])
        except JobOptionsError as exc:
            self.add_error(exc.field, str(exc))


@admin.register(RecurringTask)
class RecurringTaskAdmin(OperateMixin, DeclaredFiltersAdmin):
    form = RecurringTaskForm
    formfield_overrides = {models.JSONField: {"form_class": GuardedJSONField}}
    list_display = [
        "name",
        "handler",
        "period",
        "timezone",
        "slices",
        "active",
        "next_from",
        "dashboard",
    ]
    list_filter = ["active"]
    search_fields = ["name", "handler"]
    actions = ["pause_tasks", "resume_tasks"]

    def get_readonly_fields(self, request, obj=None):
        machine = ["first_period", "next_from", "next_period", "next_slices", "created_at"]
        audience = ["audience", "audience_filter", "phase_strategy", "phase_shift"]
        fixed = ["name", "timezone"]
        return [*fixed, *machine, *audience, "planner_schedule"] if obj else ["planner_schedule"]

    def save_model(self, request, obj, form, change):
        saved = form.save_through_service()
        obj.pk = saved.pk
        obj.refresh_from_db()

    @admin.display(description="dashboard")
    def dashboard(self, obj):
        url = reverse("dashboard:recurring-detail", args=[obj.pk])
        return format_html('<a href="{}">plan</a>', url)

    @admin.display(description="planner run (django-celery-beat)")
    def planner_schedule(self, obj):
        from django_celery_beat.models import PeriodicTask

        entry = PeriodicTask.objects.filter(name=PLANNER_ENTRY).first()
        if entry is None:
            return "missing: run manage.py migrate"
        url = reverse("admin:django_celery_beat_periodictask_change", args=[entry.pk])
        return format_html(
            '<a href="{}">{}</a>: {}, last run {}',
            url,
            entry.name,
            entry.crontab or entry.interval,
            entry.last_run_at or "never",
        )

    pause_tasks = _operator_action(
        recurring_task_pause_audited, "Pause selected tasks", "{count} task(s) paused.", task_id=_pk
    )
    resume_tasks = _operator_action(
        recurring_task_resume_audited,
        "Resume selected tasks",
        "{count} task(s) resumed.",
        task_id=_pk,
    )


class JobQueueForm(forms.ModelForm):
    """Saved through queue_configure (audited); its refusal shows on the form."""

    class Meta:
        model = JobQueue
        fields = [
            "name",
            "paused",
            "concurrency_limit",
            "key_concurrency_limit",
            "rate_limit",
            "rate_period",
        ]

    def settings(self) -> dict[str, Any]:
        """The settings as queue_configure takes them (a stored queue's name is read-only)."""
        settings = {k: v for k, v in self.cleaned_data.items() if k in self.Meta.fields}
        settings.setdefault("name", self.instance.name)
        return settings

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            with audited_atomic():  # the service's own checks, nothing kept
                queue_configure(**self.settings())
                raise _DryRun
        except _DryRun:
            pass
        except JobInputError as exc:
            raise ValidationError(str(exc)) from exc
        return cleaned


@admin.register(JobQueue)
class JobQueueAdmin(OperateMixin, DeclaredFiltersAdmin):
    """Queues: pause, resume and limits, each change through the audited service."""

    form = JobQueueForm
    list_display = [
        "name",
        "paused",
        "concurrency_limit",
        "key_concurrency_limit",
        "rate_limit",
        "rate_period",
        "updated_at",
    ]
    actions = ["pause_queues", "resume_queues"]

    def has_add_permission(self, request) -> bool:
        return self.has_operate_permission(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return self.has_operate_permission(request)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # a queue without settings is an unlimited, running queue: clear them

    def get_readonly_fields(self, request, obj=None):
        return ["name"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        queue = queue_configure_audited(user=request.user, via=VIA, **form.settings())
        obj.pk = queue.pk

    pause_queues = _operator_action(
        queue_pause_audited, "Pause selected queues", "{count} queue(s) paused.", name=_name
    )
    resume_queues = _operator_action(
        queue_resume_audited, "Resume selected queues", "{count} queue(s) resumed.", name=_name
    )


class RoutingModeForm(forms.ModelForm):
    class Meta:
        model = RoutingMode
        fields = ["degraded", "reason", "critical_priority"]

    def clean(self):
        cleaned = super().clean()
        if self.errors or not cleaned.get("degraded"):
            return cleaned
        try:
            with audited_atomic():  # the service's own checks, nothing kept
                routing_degrade(
                    reason=cleaned["reason"], critical_priority=cleaned["critical_priority"]
                )
                raise _DryRun
        except _DryRun:
            pass
        except JobInputError as exc:
            raise ValidationError(str(exc)) from exc
        return cleaned


@admin.register(RoutingMode)
class RoutingModeAdmin(OperateMixin, DeclaredFiltersAdmin):
    """The routing mode's one row: degraded on or off, through the audited services."""

    form = RoutingModeForm
    list_display = ["id", "degraded", "reason", "critical_priority", "changed_at"]
    fields = ["degraded", "reason", "critical_priority"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return self.has_operate_permission(request)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change):
        if obj.degraded:
            routing_degrade_audited(
                user=request.user,
                via=VIA,
                reason=obj.reason,
                critical_priority=obj.critical_priority,
            )
        else:
            routing_restore_audited(user=request.user, via=VIA)


@admin.register(SlicePlan)
class SlicePlanAdmin(ReadOnlyAdmin):
    list_display = [
        "task",
        "period",
        "slice_index",
        "slices",
        "starts_at",
        "ends_at",
        "jobs_planned",
        "missed",
        "duration_ms",
        "planned_at",
    ]
    list_filter = ["task"]
    ordering = ["-period", "-slice_index"]


@admin.register(Dispatcher)
class DispatcherAdmin(ReadOnlyAdmin):
    list_display = ["name", "hostname", "pid", "heartbeat_at", "stopped_at", "partitions"]
    search_fields = ["name", "hostname"]
    ordering = ["-heartbeat_at"]


@admin.register(DispatcherCounter)
class DispatcherCounterAdmin(ReadOnlyAdmin):
    list_display = [
        "dispatcher",
        "minute",
        "polls",
        "claims",
        "claims_lost",
        "single_reads",
        "statements",
        "reaped",
        "messages",
    ]
    search_fields = ["=dispatcher"]
    ordering = ["-minute"]
    show_full_result_count = False


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = ["name", "hostname", "pid", "heartbeat_at", "running", "succeeded", "failed"]
    search_fields = ["name", "hostname"]
    ordering = ["-heartbeat_at"]


@admin.register(FreeOrdinal)
class FreeOrdinalAdmin(ReadOnlyAdmin):
    list_display = ["ordinal"]
    ordering = ["ordinal"]


@admin.register(ApiToken)
class ApiTokenAdmin(OperateMixin, ReadOnlyAdmin):
    """Listed and revoked here; created on the dashboard's API tokens page or with
    `manage.py api_token_create`. No key is stored, so none can be shown."""

    list_display = [
        "name",
        "key_prefix",
        "user",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["=user__username", "^prefix", "name"]
    ordering = ["-id"]
    fields = [
        "name",
        "key_prefix",
        "user",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    readonly_fields = fields
    actions = ["revoke_tokens"]

    @admin.display(description="key starts with")
    def key_prefix(self, obj) -> str:
        return f"{obj.prefix}…"

    revoke_tokens = _operator_action(
        api_token_revoke_audited,
        "Revoke selected tokens",
        "{count} token(s) revoked.",
        token_id=_pk,
    )


@admin.register(OperatorAction)
class OperatorActionAdmin(ReadOnlyAdmin):
    list_display = ["at", "username", "action", "target_type", "target_id", "via"]
    list_filter = ["action", "via", "target_type"]
    search_fields = ["=username", "=target_id"]
    ordering = ["-at"]
