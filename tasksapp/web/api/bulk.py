"""API endpoints on many jobs at once: an operator's action on every job a filter
matches (audited, tasksapp.web.bulk), and a batch of new jobs stored all or none."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from tasksapp.engine.services import (
    BULK_ACTIONS,
    MAX_BATCH_JOBS,
    BatchJobError,
    JobInputError,
    job_schedule_many,
)
from tasksapp.web.bulk import job_bulk_action_audited
from tasksapp.web.models import OperatorAction

from .base import TempoAPIView
from .errors import field_errors
from .serializers import JobCreateSerializer

# A request stops changing jobs after this long (at a chunk's end) and answers with
# `next_after`: a client sends it back as `after` to go on, each request short.
REQUEST_SECONDS = 20.0
ERR_JOBS = f"jobs must be a list of 1 to {MAX_BATCH_JOBS} jobs."
DENIED = OpenApiResponse(description="Not allowed for this user's role.")


class BulkActionSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=BULK_ACTIONS)
    filter = serializers.DictField(
        help_text="Criteria, all of which must hold: ids, state (one or a list),"
        " handler_prefix, queue, priority, error_contains, key_contains, run_at_from,"
        " run_at_to, created_from, created_to, finished_from, finished_to (ISO 8601)."
    )
    dry_run = serializers.BooleanField(
        help_text="true: count the jobs it would change, change nothing (and record nothing)."
    )
    after = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=2**63 - 1,
        help_text="Go on after this job id (a `next_after`).",
    )


class BulkResultSerializer(serializers.Serializer):
    action = serializers.CharField()
    dry_run = serializers.BooleanField()
    matched = serializers.IntegerField(help_text="Jobs the filter matched.")
    changed = serializers.IntegerField(
        help_text="Jobs changed; on a dry run, those it would change now."
    )
    complete = serializers.BooleanField(help_text="Every matching job was seen.")
    next_after = serializers.IntegerField(
        allow_null=True, help_text="Not complete: send it back as `after` to go on."
    )


class BulkCreateSerializer(serializers.Serializer):
    jobs = serializers.ListField(child=serializers.JSONField(), help_text="Jobs as POST /jobs/.")


class BatchJobSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    idempotency_key = serializers.CharField()
    state = serializers.CharField()
    run_at = serializers.DateTimeField()
    created = serializers.BooleanField(help_text="false: already stored under this key.")


class BatchAnswerSerializer(serializers.Serializer):
    created = serializers.IntegerField(help_text="Jobs this request stored.")
    results = BatchJobSerializer(many=True)


def _valid(serializer_class, data):
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class JobBulkActionView(TempoAPIView):
    @extend_schema(
        request=BulkActionSerializer,
        responses={
            200: BulkResultSerializer,
            400: OpenApiResponse(description="Field errors: {field: [message]}."),
            403: DENIED,
        },
        summary="Retry, cancel or run now every job a filter matches (or count them: dry_run)",
    )
    def post(self, request: Request) -> Response:
        data = _valid(BulkActionSerializer, request.data)
        try:
            result = job_bulk_action_audited(
                user=request.user,
                via=OperatorAction.Via.API,
                action=data["action"],
                filter=data["filter"],
                dry_run=data["dry_run"],
                after=data.get("after"),
                time_budget=REQUEST_SECONDS,
            )
        except JobInputError as exc:
            raise ValidationError({"filter": [str(exc)]}) from exc
        answer = {**vars(result), "complete": result.complete}
        return Response(BulkResultSerializer(answer).data)


class JobBulkCreateView(TempoAPIView):
    @extend_schema(
        request=BulkCreateSerializer,
        responses={
            201: BatchAnswerSerializer,
            200: OpenApiResponse(BatchAnswerSerializer, description="Every job stored before."),
            400: OpenApiResponse(description="{index, errors: {field: [message]}}: none stored."),
            409: OpenApiResponse(description="{detail, index, job_id}: a key's other job."),
            403: DENIED,
        },
        summary=f"Schedule 1 to {MAX_BATCH_JOBS} jobs in one insert: all of them, or none",
    )
    def post(self, request: Request) -> Response:
        jobs = request.data.get("jobs") if isinstance(request.data, dict) else None
        if not isinstance(jobs, list) or not 1 <= len(jobs) <= MAX_BATCH_JOBS:
            raise ValidationError({"jobs": [ERR_JOBS]})
        arguments = []
        for index, job in enumerate(jobs):  # each checked as POST /jobs/ checks one
            serializer = JobCreateSerializer(data=job)
            if not serializer.is_valid():
                return _refused(index, serializer.errors)
            arguments.append(dict(serializer.validated_data))
        try:
            stored = job_schedule_many(jobs=arguments)
        except BatchJobError as exc:
            if exc.job_id is None:
                return _refused(exc.index, field_errors(exc.reason))
            body = {"detail": exc.reason, "index": exc.index, "job_id": exc.job_id}
            return Response(body, status=status.HTTP_409_CONFLICT)
        created = sum(1 for _, new in stored if new)
        results = [{**_summary(job), "created": new} for job, new in stored]
        answer = BatchAnswerSerializer({"created": created, "results": results}).data
        return Response(answer, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


def _refused(index: int, errors) -> Response:
    """A batch with a bad job: nothing stored; which job, and what is wrong with it."""
    return Response({"index": index, "errors": errors}, status=status.HTTP_400_BAD_REQUEST)


def _summary(job) -> dict:
    return {
        "id": job.id,
        "idempotency_key": job.idempotency_key,
        "state": job.state,
        "run_at": job.run_at,
    }
