"""What the API accepts and returns. Input serializers check shapes and types, and job
options with the engine's own checks (tasksapp.engine.options); the services decide the
rest and say why. Either way a message comes back as the error of its field."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tasksapp.engine.handlers import ERR_HANDLER_PATH
from tasksapp.engine.models import Delivery, Job, JobState
from tasksapp.engine.options import (
    JOB_OPTION_FIELDS,
    MAX_ATTEMPTS,
    MAX_KEY_LENGTH,
    JobOptionsError,
    validated_handler,
    validated_payload,
    validated_retry_policy,
)
from tasksapp.graphs.models import Strategy
from tasksapp.graphs.services.schedule import ERR_STRATEGY
from tasksapp.recurring.models import Member, RecurringTask

HANDLER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
ERR_HANDLER_IMPORT = "handler '{path}' cannot be imported."
ERR_NUL = "{field} must not contain the NUL character (\\u0000)."
ERR_OBJECT = "{field} must be a JSON object."
MAX_PERIOD_SECONDS = 366 * 86_400


def _no_nul(value: Any, field: str) -> Any:
    """PostgreSQL's jsonb cannot store U+0000 in a string or a key."""
    if isinstance(value, str) and "\x00" in value:
        raise serializers.ValidationError(ERR_NUL.format(field=field))
    if isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key, field)
            _no_nul(item, field)
    elif isinstance(value, list):
        for item in value:
            _no_nul(item, field)
    return value


def _job_option(validator: Callable[[Any], Any], value: Any) -> Any:
    """The engine's check of a job option; its message becomes this field's error."""
    try:
        return validator(value)
    except JobOptionsError as exc:
        raise serializers.ValidationError(str(exc)) from exc


def validate_handler_path(value: str) -> str:
    if not HANDLER_RE.match(value):
        raise serializers.ValidationError(ERR_HANDLER_PATH)
    try:
        validated_handler(value)
    except JobOptionsError as exc:
        raise serializers.ValidationError(str(exc)) from exc
    except Exception as exc:  # a module that fails while importing: still the client's input
        raise serializers.ValidationError(ERR_HANDLER_IMPORT.format(path=value)) from exc
    return value


def _idempotency_key_field(stored: str) -> serializers.CharField:
    return serializers.CharField(
        max_length=MAX_KEY_LENGTH,
        required=False,
        allow_null=True,
        default=None,
        help_text=f"Scheduling the same key again returns the {stored} already stored.",
    )


# The fields every job creator takes: what runs, with which payload, and how. (A comment,
# not a docstring: the schema would show it as the description of every subclass.)
class JobOptionsSerializer(serializers.Serializer):
    handler = serializers.CharField(max_length=200, help_text="Dotted path to a callable.")
    payload = serializers.JSONField(required=False, default=dict)
    max_attempts = serializers.IntegerField(min_value=1, max_value=MAX_ATTEMPTS, default=5)
    retry_policy = serializers.JSONField(required=False, default=dict)
    delivery = serializers.ChoiceField(choices=Delivery.choices, default=Delivery.TRANSACTIONAL)
    time_limit = serializers.FloatField(
        required=False, allow_null=True, default=None, min_value=0.001, max_value=86_400 * 7
    )

    def validate_handler(self, value: str) -> str:
        return validate_handler_path(value)

    def validate_payload(self, value: Any) -> Any:
        return _job_option(validated_payload, _no_nul(value, "payload"))

    def validate_retry_policy(self, value: Any) -> Any:
        return _job_option(validated_retry_policy, _no_nul(value, "retry_policy"))


class JobCreateSerializer(JobOptionsSerializer):
    run_at = serializers.DateTimeField(help_text="When to run; with a time zone (ISO 8601).")
    idempotency_key = _idempotency_key_field("job")


class JobSerializer(serializers.ModelSerializer):
    class Meta:
        model = Job
        fields = [
            "id",
            "handler",
            "state",
            "run_at",
            "created_at",
            "claimed_at",
            "started_at",
            "finished_at",
            "attempts",
            "max_attempts",
            "delivery",
            "time_limit",
            "idempotency_key",
            "payload",
            "retry_policy",
            "last_error",
            "errors",
            "result",
        ]
        read_only_fields = fields


class GraphTaskSerializer(serializers.Serializer):
    """One task of a graph (a TaskView of tasksapp.graphs.selectors)."""

    task = serializers.CharField()
    layer = serializers.IntegerField()
    after = serializers.ListField(child=serializers.CharField(), help_text="Tasks it runs after.")
    state = serializers.CharField(
        help_text="waiting, ready, running (its child job has started), succeeded, failed, "
        "skipped or rolled_back."
    )
    attempts = serializers.IntegerField()
    result = serializers.JSONField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    errors = serializers.ListField(child=serializers.JSONField())
    job_id = serializers.IntegerField(allow_null=True, help_text="Its child job.")
    job_state = serializers.CharField(allow_null=True)
    released_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    duration_ms = serializers.FloatField(allow_null=True)
    overhead_ms = serializers.FloatField(
        allow_null=True, help_text="From its last input's completion to its own start."
    )


class GraphSerializer(serializers.Serializer):
    """A graph job's graph (a GraphView of tasksapp.graphs.selectors)."""

    id = serializers.IntegerField()
    state = serializers.CharField()
    strategy = serializers.CharField()
    has = serializers.JSONField()
    wants = serializers.ListField(child=serializers.CharField())
    goals = serializers.DictField(
        child=serializers.CharField(allow_null=True),
        help_text="Each wanted proposition and the task that provides it (null: from has).",
    )
    result = serializers.JSONField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    generation = serializers.IntegerField()
    restarts = serializers.IntegerField()
    max_restarts = serializers.IntegerField()
    max_task_attempts = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Tasks by state.")
    layers = serializers.ListField(
        child=GraphTaskSerializer(many=True), help_text="Tasks layer by layer, in plan order."
    )


class JobDetailSerializer(JobSerializer):
    """A job, and for a graph job (or one of its task jobs) the graph it belongs to; the
    view passes that graph in the context as ``graph``."""

    graph = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "graph"]
        read_only_fields = fields

    @extend_schema_field(GraphSerializer(allow_null=True))
    def get_graph(self, job: Job) -> dict | None:
        graph = self.context.get("graph")
        return None if graph is None else GraphSerializer(graph).data


class GraphJobCreateSerializer(serializers.Serializer):
    """Shapes only: graph_job_schedule plans the job and says what is wrong."""

    has = serializers.JSONField(help_text="The job's initial values by proposition name.")
    wants = serializers.ListField(
        child=serializers.CharField(max_length=200),
        allow_empty=False,
        help_text="The propositions the job must produce.",
    )
    strategy = serializers.ChoiceField(
        choices=Strategy.choices,
        default=Strategy.ABORT,
        error_messages={"invalid_choice": ERR_STRATEGY.format(choices=", ".join(Strategy.values))},
        help_text="What a failed task leads to.",
    )
    run_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Default: now."
    )
    idempotency_key = _idempotency_key_field("graph job")
    max_restarts = serializers.IntegerField(min_value=0, max_value=100, default=2)
    max_task_attempts = serializers.IntegerField(min_value=1, max_value=100, default=3)
    task_retry_policy = serializers.JSONField(
        required=False, allow_null=True, default=None, help_text="Delays between reruns."
    )

    def validate_has(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise serializers.ValidationError(ERR_OBJECT.format(field="has"))
        return _no_nul(value, "has")

    def validate_wants(self, value: list[str]) -> list[str]:
        return _no_nul(value, "wants")

    def validate_task_retry_policy(self, value: Any) -> Any:
        return _job_option(validated_retry_policy, _no_nul(value, "task_retry_policy"))


class JobListQuerySerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=JobState.choices, required=False)
    handler = serializers.CharField(max_length=200, required=False)
    task = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False)
    member = serializers.CharField(max_length=200, required=False, help_text="external_id")
    run_at_from = serializers.DateTimeField(required=False)
    run_at_to = serializers.DateTimeField(required=False)
    cursor = serializers.CharField(max_length=200, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=500, default=50)


class JobPageSerializer(serializers.Serializer):
    results = JobSerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="Cursor of the next page.")


class RetrySerializer(serializers.Serializer):
    run_at = serializers.DateTimeField(required=False, allow_null=True, default=None)


class MemberCreateSerializer(serializers.Serializer):
    external_id = serializers.CharField(max_length=200, help_text="The member's id in the product.")


class MemberSerializer(serializers.ModelSerializer):
    class Meta:
        model = Member
        fields = ["id", "external_id", "ordinal", "phase", "active", "created_at"]
        read_only_fields = fields


class MemberListQuerySerializer(serializers.Serializer):
    external_id = serializers.CharField(max_length=200, required=False)
    after = serializers.IntegerField(min_value=0, max_value=2**63 - 1, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=500, default=100)


class MemberPageSerializer(serializers.Serializer):
    results = MemberSerializer(many=True)
    next = serializers.IntegerField(allow_null=True, help_text="`after` for the next page.")


class RecurringTaskCreateSerializer(JobOptionsSerializer):
    name = serializers.CharField(max_length=100)
    period_seconds = serializers.IntegerField(min_value=60, max_value=MAX_PERIOD_SECONDS)
    slices = serializers.IntegerField(min_value=1, max_value=10_000, default=1)
    epoch = serializers.DateTimeField(required=False, allow_null=True, default=None)
    active = serializers.BooleanField(default=True)

    def validate_payload(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise serializers.ValidationError(ERR_OBJECT.format(field="payload"))
        return super().validate_payload(value)

    def service_arguments(self) -> dict[str, Any]:
        data = dict(self.validated_data)
        data["period"] = dt.timedelta(seconds=data.pop("period_seconds"))
        return data


class RecurringTaskSerializer(serializers.ModelSerializer):
    period_seconds = serializers.SerializerMethodField()
    next_period_seconds = serializers.SerializerMethodField()

    class Meta:
        model = RecurringTask
        fields = [
            "id",
            "name",
            "handler",
            "payload",
            *JOB_OPTION_FIELDS,
            "epoch",
            "first_period",
            "period_seconds",
            "slices",
            "next_from",
            "next_period_seconds",
            "next_slices",
            "active",
            "created_at",
        ]
        read_only_fields = fields

    def get_period_seconds(self, task: RecurringTask) -> float:
        return task.period.total_seconds()

    def get_next_period_seconds(self, task: RecurringTask) -> float | None:
        return task.next_period.total_seconds() if task.next_period else None


class NextRunsSerializer(serializers.Serializer):
    member = serializers.CharField()
    runs = serializers.ListField(child=serializers.DateTimeField())
