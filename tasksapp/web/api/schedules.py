"""The HTTP API of schedules: list, create, read, edit, delete; pause, resume, run now;
fire times in a range and the last runs. Writes go through the audited services
(schedule_operators.py); a service's refusal is a 400 naming the field, an unknown
schedule a 404."""

from __future__ import annotations

import re
from typing import Any

from django.shortcuts import get_object_or_404
from django.urls import path
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from tasksapp.schedules.models import Catchup, Overlap, Schedule, ScheduleRun
from tasksapp.schedules.selectors import (
    ScheduleReadError,
    schedule_fire_times,
    schedule_in_words,
    schedule_next_fires,
    schedule_runs,
)
from tasksapp.schedules.services import ScheduleInputError, duration_of
from tasksapp.web.api.serializers import JobOptionsSerializer
from tasksapp.web.api.views import TempoApiView
from tasksapp.web.models import OperatorAction
from tasksapp.web.schedule_operators import (
    schedule_create_audited,
    schedule_delete_audited,
    schedule_pause_audited,
    schedule_resume_audited,
    schedule_run_now_audited,
    schedule_update_audited,
)

VIA = OperatorAction.Via.API
NOT_FOUND_RE = re.compile(r"^schedule \S+ does not exist")
FIELD_RE = re.compile(r"^([a-z_]+)[ .:]")
# The field a service's message names, as the API names it.
SECONDS_FIELDS = {"every": "every_seconds", "jitter": "jitter_seconds"}
SECONDS_FIELDS["catchup_window"] = "catchup_window_seconds"
BAD_REQUEST = OpenApiResponse(description="Field errors: {field: [message]}.")
NOT_FOUND = OpenApiResponse(description="No such schedule.")
NEXT_FIRES = 10


class ScheduleWriteSerializer(JobOptionsSerializer):
    name = serializers.CharField(max_length=100)
    cron = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="5 fields, or 6 seconds first."
    )
    every_seconds = serializers.FloatField(
        required=False, allow_null=True, default=None, help_text="Elapsed time between fires."
    )
    timezone = serializers.CharField(required=False, default="UTC", help_text="An IANA zone.")
    start_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    end_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    jitter_seconds = serializers.FloatField(required=False, default=0, min_value=0)
    catchup = serializers.ChoiceField(choices=Catchup.choices, default=Catchup.ONE)
    catchup_window_seconds = serializers.FloatField(required=False, default=3600, min_value=0)
    overlap = serializers.ChoiceField(choices=Overlap.choices, default=Overlap.ALLOW)
    active = serializers.BooleanField(default=True)

    def service_arguments(self) -> dict[str, Any]:
        """The fields given, as the services take them (seconds as timedeltas)."""
        data = dict(self.validated_data)
        for name, field in SECONDS_FIELDS.items():
            if field in data:
                data[name] = duration_of(data.pop(field))
        return data


class ScheduleSerializer(serializers.ModelSerializer):
    every_seconds = serializers.SerializerMethodField()
    jitter_seconds = serializers.SerializerMethodField()
    catchup_window_seconds = serializers.SerializerMethodField()
    in_words = serializers.SerializerMethodField()
    next_fires = serializers.SerializerMethodField()

    class Meta:
        model = Schedule
        fields = [
            "id",
            "name",
            "handler",
            "payload",
            "cron",
            "every_seconds",
            "timezone",
            "start_at",
            "end_at",
            "jitter_seconds",
            "catchup",
            "catchup_window_seconds",
            "overlap",
            "active",
            "max_attempts",
            "retry_policy",
            "delivery",
            "time_limit",
            "queue",
            "priority",
            "concurrency_key",
            "planned_until",
            "created_at",
            "updated_at",
            "in_words",
            "next_fires",
        ]

    def get_every_seconds(self, schedule: Schedule) -> float | None:
        return None if schedule.every is None else schedule.every.total_seconds()

    def get_jitter_seconds(self, schedule: Schedule) -> float:
        return schedule.jitter.total_seconds()

    def get_catchup_window_seconds(self, schedule: Schedule) -> float:
        return schedule.catchup_window.total_seconds()

    def get_in_words(self, schedule: Schedule) -> str:
        return schedule_in_words(schedule=schedule)

    def get_next_fires(self, schedule: Schedule) -> list[dict[str, str]]:
        fires = schedule_next_fires(schedule=schedule, after=timezone.now(), count=NEXT_FIRES)
        return [{"utc": f.utc.isoformat(), "local": f.local.isoformat()} for f in fires]


class ScheduleRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = ScheduleRun
        fields = ["fire_at", "run_at", "job_id", "outcome", "decided_at", "details"]


class FireTimesQuerySerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


def _refusal(exc: Exception) -> Response:
    message = str(exc)
    if NOT_FOUND_RE.match(message):
        return Response({"detail": message}, status=status.HTTP_404_NOT_FOUND)
    match = FIELD_RE.match(message)
    name = match.group(1) if match else ""
    known = set(ScheduleWriteSerializer().fields) | {"start", "end"}
    field = SECONDS_FIELDS.get(name, name if name in known else "non_field_errors")
    return Response({field: [message]}, status=status.HTTP_400_BAD_REQUEST)


class ScheduleApiView(TempoApiView):
    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, ScheduleInputError | ScheduleReadError):
            return _refusal(exc)
        return super().handle_exception(exc)


def _body(request: Request, *, partial: bool = False) -> dict[str, Any]:
    serializer = ScheduleWriteSerializer(data=request.data, partial=partial)
    serializer.is_valid(raise_exception=True)
    return serializer.service_arguments()


class ScheduleListView(ScheduleApiView):
    @extend_schema(responses={200: ScheduleSerializer(many=True)}, summary="Schedules")
    def get(self, request: Request) -> Response:
        schedules = Schedule.objects.order_by("name")
        return Response(ScheduleSerializer(schedules, many=True).data)

    @extend_schema(
        request=ScheduleWriteSerializer,
        responses={201: ScheduleSerializer, 400: BAD_REQUEST},
        summary="Create a schedule (planned at once a few minutes ahead)",
    )
    def post(self, request: Request) -> Response:
        schedule = schedule_create_audited(user=request.user, via=VIA, **_body(request))
        return Response(ScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)


class ScheduleDetailView(ScheduleApiView):
    @extend_schema(responses={200: ScheduleSerializer, 404: NOT_FOUND}, summary="A schedule")
    def get(self, request: Request, schedule_id: int) -> Response:
        return Response(ScheduleSerializer(get_object_or_404(Schedule, id=schedule_id)).data)

    @extend_schema(
        request=ScheduleWriteSerializer,
        responses={200: ScheduleSerializer, 400: BAD_REQUEST, 404: NOT_FOUND},
        summary="Edit a schedule (from its next fire time not yet planned)",
    )
    def patch(self, request: Request, schedule_id: int) -> Response:
        changes = _body(request, partial=True)
        schedule = schedule_update_audited(
            user=request.user, schedule_id=schedule_id, via=VIA, **changes
        )
        return Response(ScheduleSerializer(schedule).data)

    @extend_schema(
        responses={200: OpenApiResponse(description="{id, name, jobs_cancelled}"), 404: NOT_FOUND},
        summary="Delete a schedule; its waiting jobs are cancelled",
    )
    def delete(self, request: Request, schedule_id: int) -> Response:
        return Response(
            schedule_delete_audited(user=request.user, schedule_id=schedule_id, via=VIA)
        )


class SchedulePauseView(ScheduleApiView):
    @extend_schema(
        request=None, responses={200: ScheduleSerializer, 404: NOT_FOUND}, summary="Pause"
    )
    def post(self, request: Request, schedule_id: int) -> Response:
        schedule = schedule_pause_audited(user=request.user, schedule_id=schedule_id, via=VIA)
        return Response(ScheduleSerializer(schedule).data)


class ScheduleResumeView(ScheduleApiView):
    @extend_schema(
        request=None, responses={200: ScheduleSerializer, 404: NOT_FOUND}, summary="Resume"
    )
    def post(self, request: Request, schedule_id: int) -> Response:
        schedule = schedule_resume_audited(user=request.user, schedule_id=schedule_id, via=VIA)
        return Response(ScheduleSerializer(schedule).data)


class ScheduleRunNowView(ScheduleApiView):
    @extend_schema(
        request=None, responses={200: ScheduleRunSerializer, 404: NOT_FOUND}, summary="Run now"
    )
    def post(self, request: Request, schedule_id: int) -> Response:
        run = schedule_run_now_audited(user=request.user, schedule_id=schedule_id, via=VIA)
        return Response(ScheduleRunSerializer(run).data)


class ScheduleFireTimesView(ScheduleApiView):
    @extend_schema(
        parameters=[FireTimesQuerySerializer],
        responses={200: OpenApiResponse(description="[UTC instants]"), 400: BAD_REQUEST},
        summary="The instants the planner fires the schedule at in [start, end]",
    )
    def get(self, request: Request, schedule_id: int) -> Response:
        query = FireTimesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        schedule = get_object_or_404(Schedule, id=schedule_id)
        fires = schedule_fire_times(schedule=schedule, **query.validated_data)
        return Response([fire.isoformat() for fire in fires])


class ScheduleRunsView(ScheduleApiView):
    @extend_schema(responses={200: ScheduleRunSerializer(many=True)}, summary="Last runs")
    def get(self, request: Request, schedule_id: int) -> Response:
        schedule = get_object_or_404(Schedule, id=schedule_id)
        rows = []
        for view in schedule_runs(schedule=schedule):
            row = ScheduleRunSerializer(view.run).data
            row["job_state"] = view.job_state
            row["lag_ms"] = None if view.lag is None else view.lag.total_seconds() * 1000
            rows.append(row)
        return Response(rows)


urlpatterns = [
    path("schedules/", ScheduleListView.as_view(), name="schedules"),
    path("schedules/<int:schedule_id>/", ScheduleDetailView.as_view(), name="schedule"),
    path("schedules/<int:schedule_id>/pause/", SchedulePauseView.as_view(), name="schedule-pause"),
    path(
        "schedules/<int:schedule_id>/resume/",
        ScheduleResumeView.as_view(),
        name="schedule-resume",
    ),
    path(
        "schedules/<int:schedule_id>/run-now/",
        ScheduleRunNowView.as_view(),
        name="schedule-run-now",
    ),
    path(
        "schedules/<int:schedule_id>/fire-times/",
        ScheduleFireTimesView.as_view(),
        name="schedule-fire-times",
    ),
    path("schedules/<int:schedule_id>/runs/", ScheduleRunsView.as_view(), name="schedule-runs"),
]
