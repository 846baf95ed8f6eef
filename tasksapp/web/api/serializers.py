"""What the API accepts and returns. Input serializers check shapes and types, and job
options with the engine's own checks (tasksapp.engine.options); the services decide the
rest and say why. Either way a message comes back as the error of its field."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tasksapp.engine.handlers import ERR_HANDLER_PATH
from tasksapp.engine.jsonvalues import JsonValueError, checked_json, safe_json
from tasksapp.engine.models import Delivery, Job, JobState
from tasksapp.engine.options import (
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    JOB_OPTION_FIELDS,
    MAX_ATTEMPTS,
    MAX_KEY_LENGTH,
    JobOptionsError,
    validated_handler,
    validated_payload,
    validated_priority,
    validated_queue,
    validated_retention,
    validated_retry_policy,
)
from tasksapp.engine.settings import tempo_settings
from tasksapp.graphs.models import Strategy
from tasksapp.graphs.services.schedule import ERR_STRATEGY
from tasksapp.recurring.models import Member, RecurringTask

HANDLER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
ERR_HANDLER_IMPORT = "handler '{path}' cannot be imported."
ERR_OBJECT = "{field} must be a JSON object."
MAX_PERIOD_SECONDS = 366 * 86_400
MAX_PAGE = 200  # the most rows one list answer holds (?limit=)
# A job in a list answer carries its payload, result and errors only when each is at
# most this long as JSON text; a larger one is null there and named in `omitted`
# (the job's own answer, GET /api/jobs/{id}/, has it).
LIST_JSON_CHARS = 16_384
LARGE_JSON_FIELDS = ("payload", "result", "errors", "history")


def _storable(value: Any, field: str) -> Any:
    """A JSON field's value as it will be stored, or the field's error: the engine's
    check (tasksapp.engine.jsonvalues) with the payload's limits."""
    limits = tempo_settings()
    try:
        return checked_json(
            value,
            what=field,
            max_bytes=limits.max_payload_bytes,
            max_depth=limits.max_json_depth,
            limit_name="TEMPO_MAX_PAYLOAD_BYTES",
        )
    except JsonValueError as exc:
        raise serializers.ValidationError(str(exc)) from exc


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
MAX_HTTP_WAIT_SECONDS = 60  # accepted; the server waits far less (waits.py)
ERR_WAIT_NUMBER = "timeout must be a number of seconds from 0 to {most}."


class JobOptionsSerializer(serializers.Serializer):
    handler = serializers.CharField(max_length=200, help_text="Dotted path to a callable.")
    payload = serializers.JSONField(required=False, default=dict)
    max_attempts = serializers.IntegerField(min_value=1, max_value=MAX_ATTEMPTS, default=5)
    retry_policy = serializers.JSONField(required=False, default=dict)
    delivery = serializers.ChoiceField(choices=Delivery.choices, default=Delivery.TRANSACTIONAL)
    time_limit = serializers.FloatField(
        required=False, allow_null=True, default=None, min_value=0.001, max_value=86_400 * 7
    )
    queue = serializers.CharField(
        required=False, default=DEFAULT_QUEUE, help_text="Its queue: limits, workers."
    )
    priority = serializers.JSONField(
        required=False,
        default=DEFAULT_PRIORITY,
        help_text="0 (lowest) to 9 (highest), or low, normal, high, critical.",
    )
    concurrency_key = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="Counted by its queue's per-key concurrency limit.",
    )

    def validate_handler(self, value: str) -> str:
        return validate_handler_path(value)

    def validate_queue(self, value: Any) -> str:
        return _job_option(validated_queue, value)

    def validate_priority(self, value: Any) -> int:
        return _job_option(validated_priority, value)

    def validate_payload(self, value: Any) -> Any:
        return _job_option(validated_payload, value)

    def validate_retry_policy(self, value: Any) -> Any:
        return _job_option(validated_retry_policy, _storable(value, "retry_policy"))


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
            "queue",
            "priority",
            "concurrency_key",
            "idempotency_key",
            "payload",
            "retry_policy",
            "last_error",
            "errors",
            "result",
            "cancel_requested_at",
            "history",
        ]
        read_only_fields = fields

    @classmethod
    def many_init(cls, *args: Any, **kwargs: Any) -> serializers.ListSerializer:
        # A list of jobs leaves large JSON out, whoever builds it (the list view's
        # JobSerializer(jobs, many=True) included): a list of JobListItemSerializer.
        if cls is JobSerializer:
            return JobListItemSerializer.many_init(*args, **kwargs)
        return super().many_init(*args, **kwargs)

    def to_representation(self, instance: Job) -> dict[str, Any]:
        # A row stored before the JSON checks may hold a lone surrogate (SQLite kept its
        # escape): shown as U+FFFD rather than failing the whole answer.
        return safe_json(super().to_representation(instance))


class JobListItemSerializer(JobSerializer):
    """A job in a list answer: payload, result and errors only when each is at most
    LIST_JSON_CHARS long as JSON text; a larger one is null and named in `omitted`."""

    omitted = serializers.SerializerMethodField(
        help_text=f"Fields left out (null here) for being over {LIST_JSON_CHARS} characters "
        "of JSON: GET /api/jobs/{id}/ has them."
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "omitted"]
        read_only_fields = fields

    def get_omitted(self, job: Job) -> list[str]:
        return list(getattr(job, "omitted_json", ()))

    def to_representation(self, instance: Job) -> dict[str, Any]:
        data = super().to_representation(instance)
        omitted = data["omitted"]
        for name in LARGE_JSON_FIELDS:
            # The selector leaves large values unloaded (job_page's json_inline_chars);
            # a job loaded in full is measured here.
            if name not in omitted and len(json.dumps(data[name])) > LIST_JSON_CHARS:
                omitted.append(name)
            if name in omitted:
                data[name] = None
        return data


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
    cancelled_at = serializers.DateTimeField(allow_null=True)
    on_complete = serializers.CharField(allow_blank=True)
    done = serializers.BooleanField(help_text="The graph has ended (whatever its outcome).")
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
    on_complete = serializers.CharField(
        max_length=200,
        required=False,
        allow_null=True,
        default=None,
        help_text="A registered handler, run as a job of its own when the graph ends.",
    )

    def validate_has(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise serializers.ValidationError(ERR_OBJECT.format(field="has"))
        return _storable(value, "has")

    def validate_task_retry_policy(self, value: Any) -> Any:
        return _job_option(validated_retry_policy, _storable(value, "task_retry_policy"))


class GraphWaitQuerySerializer(serializers.Serializer):
    timeout = serializers.FloatField(
        min_value=0,
        max_value=MAX_HTTP_WAIT_SECONDS,
        default=30,
        help_text="Seconds to wait for the graph to end at most; the server waits a couple"
        " of seconds at most (tasksapp/web/api/waits.py) and answers `done` false: ask again.",
    )

    def validate_timeout(self, value: float) -> float:
        if not math.isfinite(value):  # NaN passes both bounds
            raise serializers.ValidationError(ERR_WAIT_NUMBER.format(most=MAX_HTTP_WAIT_SECONDS))
        return value


class GraphWaitSerializer(JobDetailSerializer):
    """The graph job when the wait ended: `done` says whether the graph had ended."""

    done = serializers.SerializerMethodField()

    class Meta(JobDetailSerializer.Meta):
        fields = [*JobDetailSerializer.Meta.fields, "done"]
        read_only_fields = fields

    def get_done(self, job: Job) -> bool:
        graph = self.context.get("graph")
        return bool(graph is not None and graph.done)


class JobListQuerySerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=JobState.choices, required=False)
    handler = serializers.CharField(
        max_length=200, required=False, help_text="A prefix: `myjobs` finds `myjobs.a.b`."
    )
    queue = serializers.CharField(max_length=64, required=False)
    priority = serializers.IntegerField(min_value=0, max_value=9, required=False)
    text = serializers.CharField(
        max_length=200,
        required=False,
        help_text="In the last error, the idempotency key or the payload; searched in the "
        "10,000 latest jobs matching the other filters before the cursor (`next` goes on).",
    )
    task = serializers.IntegerField(min_value=1, max_value=2**63 - 1, required=False)
    member = serializers.CharField(max_length=200, required=False, help_text="external_id")
    run_at_from = serializers.DateTimeField(required=False)
    run_at_to = serializers.DateTimeField(required=False)
    cursor = serializers.CharField(max_length=200, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, default=50)


class JobPageSerializer(serializers.Serializer):
    results = JobListItemSerializer(many=True)
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
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, default=100)


class MemberPageSerializer(serializers.Serializer):
    results = MemberSerializer(many=True)
    next = serializers.IntegerField(allow_null=True, help_text="`after` for the next page.")


class RecurringTaskCreateSerializer(JobOptionsSerializer):
    name = serializers.CharField(max_length=100)
    period_seconds = serializers.IntegerField(min_value=60, max_value=MAX_PERIOD_SECONDS)
    slices = serializers.IntegerField(min_value=1, max_value=10_000, default=1)
    epoch = serializers.DateTimeField(required=False, allow_null=True, default=None)
    timezone = serializers.CharField(
        max_length=64,
        required=False,
        default="UTC",
        help_text='An IANA time zone ("Europe/Berlin"): periods of whole days follow its '
        "calendar days from local midnight. UTC: fixed-length periods from the epoch.",
    )
    active = serializers.BooleanField(default=True)
    retention = serializers.JSONField(
        required=False,
        default=dict,
        help_text='Days its finished jobs are kept, per state: {"succeeded": 3, "dead": 60}.',
    )
    audience = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        default="",
        help_text='A model label ("auth.User") or a registered @audience function; '
        "empty: every active member.",
    )
    audience_filter = serializers.JSONField(
        required=False, default=dict, help_text='Field lookups: {"is_active": true}.'
    )
    phase_strategy = serializers.ChoiceField(choices=["golden", "random"], default="golden")
    align_with = serializers.PrimaryKeyRelatedField(
        queryset=RecurringTask.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="Run at the same phases as this task (both with an audience).",
    )

    def validate_payload(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise serializers.ValidationError(ERR_OBJECT.format(field="payload"))
        return super().validate_payload(value)

    def validate_retention(self, value: Any) -> dict[str, float]:
        return _job_option(validated_retention, value)

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
            "timezone",
            "slices",
            "next_from",
            "next_period_seconds",
            "next_slices",
            "active",
            "retention",
            "created_at",
            "audience",
            "audience_filter",
            "phase_strategy",
            "phase_shift",
            "aligned_with",
            "audience_synced_at",
            "audience_joined",
            "audience_left",
        ]
        read_only_fields = fields

    def get_period_seconds(self, task: RecurringTask) -> float:
        return task.period.total_seconds()

    def get_next_period_seconds(self, task: RecurringTask) -> float | None:
        return task.next_period.total_seconds() if task.next_period else None


class NextRunsSerializer(serializers.Serializer):
    member = serializers.CharField()
    runs = serializers.ListField(child=serializers.DateTimeField())


class QueueSettingsSerializer(serializers.Serializer):
    """A queue's settings to change; the ones left out stay as they are."""

    paused = serializers.BooleanField(required=False)
    concurrency_limit = serializers.IntegerField(
        required=False, allow_null=True, help_text="At most this many claimed or running."
    )
    key_concurrency_limit = serializers.IntegerField(
        required=False, allow_null=True, help_text="At most this many per concurrency key."
    )
    rate_limit = serializers.IntegerField(
        required=False, allow_null=True, help_text="At most this many starts per rate_period."
    )
    rate_period = serializers.FloatField(required=False, help_text="Seconds.")


class QueueSerializer(serializers.Serializer):
    name = serializers.CharField()
    due = serializers.IntegerField(help_text="Due by now, not claimed yet.")
    active = serializers.IntegerField(help_text="Claimed or running.")
    served = serializers.BooleanField(help_text="A live worker consumes its Celery queue.")
    unserved = serializers.BooleanField(help_text="Has jobs and no live worker.")
    paused = serializers.BooleanField()
    concurrency_limit = serializers.IntegerField(allow_null=True)
    key_concurrency_limit = serializers.IntegerField(allow_null=True)
    rate_limit = serializers.IntegerField(allow_null=True)
    rate_period = serializers.FloatField(allow_null=True)


class DegradeSerializer(serializers.Serializer):
    reason = serializers.CharField(allow_blank=True, default="", max_length=200)
    critical_priority = serializers.JSONField(
        required=False, default=9, help_text="Claimed while degraded: this priority and above."
    )


class RoutingSerializer(serializers.Serializer):
    degraded = serializers.BooleanField(help_text="Switched on by an operator.")
    reason = serializers.CharField()
    critical_priority = serializers.IntegerField()
    changed_at = serializers.DateTimeField(allow_null=True)
    active = serializers.BooleanField(help_text="Some dispatcher claims only critical jobs.")
    dispatchers = serializers.ListField(
        child=serializers.DictField(), help_text="Dispatchers degraded now, and why."
    )
