"""API endpoints: parse with a serializer, call one service or selector, answer.

Writes that operators take (cancel, retry, run now, pause, resume, member (de)activation)
go through the `*_audited` services and are recorded; scheduling jobs and creating
members or tasks is ordinary traffic and is not."""

from __future__ import annotations

from dataclasses import asdict

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from tasksapp.engine.models import Job
from tasksapp.engine.services import job_schedule_or_get
from tasksapp.graphs.selectors import GraphWaitTimeout, graph_job_wait, graph_run_id_for_job
from tasksapp.graphs.services import graph_job_schedule_or_get
from tasksapp.recurring.models import Member, RecurringTask
from tasksapp.recurring.selectors.plans import member_runs_for_task
from tasksapp.recurring.services import member_create, recurring_task_create
from tasksapp.web.models import ApiToken, OperatorAction
from tasksapp.web.operators import (
    acting_token,
    graph_cancel_audited,
    job_cancel_audited,
    job_retry_audited,
    job_run_now_audited,
    member_activate_audited,
    member_deactivate_audited,
    queue_configure_audited,
    queue_pause_audited,
    queue_resume_audited,
    recurring_task_pause_audited,
    recurring_task_resume_audited,
    routing_degrade_audited,
    routing_restore_audited,
)
from tasksapp.web.selectors.jobs import JobFilters, job_graph, job_page
from tasksapp.web.selectors.queues import queues_overview, routing_state

from . import serializers as s
from .base import TempoAPIView
from .waits import WAIT_MOST_SECONDS, graph_wait_slot, wait_seconds

VIA = OperatorAction.Via.API
ERR_UNKNOWN_TASK = "task {value} does not exist."
ERR_UNKNOWN_MEMBER = "member {value!r} does not exist."
BAD_REQUEST = OpenApiResponse(description="Field errors: {field: [message]}.")
NOT_FOUND = OpenApiResponse(description="No such object.")
DENIED = OpenApiResponse(description="Not allowed for this user's role.")
KEY_CONFLICT = OpenApiResponse(
    description="The idempotency key belongs to a stored job with other parameters:"
    " {detail, job_id}."
)


class EndpointView(TempoAPIView):
    """The base of this module's endpoints: Tempo's API policy, and while one answers,
    the audit records name the API token the request authenticated with
    (operators.acting_token), if any."""

    def dispatch(self, request, *args, **kwargs):
        before = acting_token.set(None)
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            acting_token.reset(before)

    def perform_authentication(self, request) -> None:
        super().perform_authentication(request)
        acting_token.set(request.auth if isinstance(request.auth, ApiToken) else None)


TempoApiView = EndpointView  # the name other endpoint modules import (schedules.py)


def _operator_action_schema(
    answer: type[Serializer],
    summary: str,
    *,
    request: type[Serializer] | None = None,
    refusable: bool = True,
):
    """The schema of a POST that runs one audited service on the object in its URL and
    answers with that object; `refusable`: the service may refuse it (400)."""
    refused = {400: BAD_REQUEST} if refusable else {}
    responses = {200: answer, **refused, 403: DENIED, 404: NOT_FOUND}
    return extend_schema(request=request, responses=responses, summary=summary)


def _query(serializer_class, request: Request):
    serializer = serializer_class(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _body(serializer_class, request: Request):
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer


class JobListView(EndpointView):
    @extend_schema(
        parameters=[s.JobListQuerySerializer],
        responses={200: s.JobPageSerializer, 400: BAD_REQUEST},
        summary="Jobs, latest run time first, paged by cursor",
        operation_id="jobs_list",
    )
    def get(self, request: Request) -> Response:
        query = _query(s.JobListQuerySerializer, request)
        filters = JobFilters(
            state=query.get("state"),
            handler=query.get("handler"),
            task=_task_filter(query.get("task")),
            member=_member_filter(query.get("member")),
            run_at_from=query.get("run_at_from"),
            run_at_to=query.get("run_at_to"),
            queue=query.get("queue"),
            priority=query.get("priority"),
            text=query.get("text"),
        )
        page = job_page(
            filters=filters,
            cursor=query.get("cursor"),
            limit=query["limit"],
            columns=None,
            json_inline_chars=s.LIST_JSON_CHARS,  # large JSON is not even read
        )
        return Response(
            {"results": s.JobSerializer(page.jobs, many=True).data, "next": page.next_cursor}
        )

    @extend_schema(
        request=s.JobCreateSerializer,
        responses={
            201: s.JobSerializer,
            200: OpenApiResponse(s.JobSerializer, description="Already stored under this key."),
            400: BAD_REQUEST,
            409: KEY_CONFLICT,
            403: DENIED,
        },
        summary="Schedule a job (idempotent with idempotency_key)",
    )
    def post(self, request: Request) -> Response:
        data = _body(s.JobCreateSerializer, request).validated_data
        job, created = job_schedule_or_get(**data)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(s.JobSerializer(job).data, status=code)


def _task_filter(task_id: int | None) -> RecurringTask | None:
    if task_id is None:
        return None
    task = RecurringTask.objects.filter(id=task_id).first()
    if task is None:
        from rest_framework.exceptions import ValidationError

        raise ValidationError({"task": [ERR_UNKNOWN_TASK.format(value=task_id)]})
    return task


def _member_filter(external_id: str | None) -> Member | None:
    if external_id is None:
        return None
    member = Member.objects.filter(external_id=external_id).first()
    if member is None:
        from rest_framework.exceptions import ValidationError

        raise ValidationError({"member": [ERR_UNKNOWN_MEMBER.format(value=external_id)]})
    return member


def _job_detail(job: Job) -> dict:
    return s.JobDetailSerializer(job, context={"graph": job_graph(job=job)}).data


class JobDetailView(EndpointView):
    @extend_schema(
        responses={200: s.JobDetailSerializer, 404: NOT_FOUND},
        summary="One job, with its graph for a graph job or one of its task jobs",
    )
    def get(self, request: Request, job_id: int) -> Response:
        return Response(_job_detail(get_object_or_404(Job, id=job_id)))


class GraphJobCreateView(EndpointView):
    @extend_schema(
        request=s.GraphJobCreateSerializer,
        responses={
            201: s.JobDetailSerializer,
            200: OpenApiResponse(
                s.JobDetailSerializer, description="Already stored under this key."
            ),
            400: BAD_REQUEST,
            409: KEY_CONFLICT,
            403: DENIED,
        },
        summary="Schedule a graph job: plan has → wants (idempotent with idempotency_key)",
    )
    def post(self, request: Request) -> Response:
        data = _body(s.GraphJobCreateSerializer, request).validated_data
        options = {name: value for name, value in data.items() if value is not None}
        graph, created = graph_job_schedule_or_get(**options)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(_job_detail(graph.job), status=code)


def _graph_job(job_id: int) -> tuple[Job, int]:
    """The job and the graph it belongs to; 404 for a job of no graph."""
    job = get_object_or_404(Job, id=job_id)
    graph_run_id = graph_run_id_for_job(job_id=job.id)
    if graph_run_id is None:
        raise Http404(f"job {job_id} belongs to no graph.")
    return job, graph_run_id


class GraphJobCancelView(EndpointView):
    @_operator_action_schema(
        s.JobDetailSerializer,
        "Cancel a graph (by its graph job or one of its task jobs): tasks not started are"
        " cancelled, running ones asked to stop; with rollback, finished tasks are undone",
    )
    def post(self, request: Request, job_id: int) -> Response:
        job, _ = _graph_job(job_id)
        graph = graph_cancel_audited(user=request.user, job_id=job.id, via=VIA)
        return Response(_job_detail(graph.job))


class GraphJobWaitView(EndpointView):
    @extend_schema(
        parameters=[s.GraphWaitQuerySerializer],
        responses={200: s.GraphWaitSerializer, 400: BAD_REQUEST, 404: NOT_FOUND},
        summary=f"Wait (short poll) until a graph ends, at most `timeout` and at most"
        f" {WAIT_MOST_SECONDS:g} s; `done` says if it did (else ask again)",
    )
    def get(self, request: Request, job_id: int) -> Response:
        timeout = _query(s.GraphWaitQuerySerializer, request)["timeout"]
        _, graph_run_id = _graph_job(job_id)
        with graph_wait_slot(user=request.user) as held:
            try:
                graph = graph_job_wait(graph_run_id, wait_seconds(asked=timeout, held=held))
            except GraphWaitTimeout as waited:
                graph = waited.graph
        parent = Job.objects.get(id=graph.job_id)
        return Response(s.GraphWaitSerializer(parent, context={"graph": graph}).data)


class JobCancelView(EndpointView):
    @_operator_action_schema(
        s.JobSerializer,
        "Cancel a job: a scheduled or failed one at once; a claimed or running one is asked"
        " to stop (cancel_requested_at) and ends cancelled when its handler checks",
    )
    def post(self, request: Request, job_id: int) -> Response:
        job = job_cancel_audited(user=request.user, job_id=job_id, via=VIA)
        return Response(s.JobSerializer(job).data)


class JobRetryView(EndpointView):
    @_operator_action_schema(
        s.JobSerializer,
        "Retry a dead, lost, cancelled or failed job (now, or at run_at)",
        request=s.RetrySerializer,
    )
    def post(self, request: Request, job_id: int) -> Response:
        run_at = _body(s.RetrySerializer, request).validated_data.get("run_at")
        job = job_retry_audited(user=request.user, job_id=job_id, via=VIA, run_at=run_at)
        return Response(s.JobSerializer(job).data)


class JobRunNowView(EndpointView):
    @_operator_action_schema(s.JobSerializer, "Move a waiting job's run time to now")
    def post(self, request: Request, job_id: int) -> Response:
        job = job_run_now_audited(user=request.user, job_id=job_id, via=VIA)
        return Response(s.JobSerializer(job).data)


class MemberListView(EndpointView):
    @extend_schema(
        parameters=[s.MemberListQuerySerializer],
        responses={200: s.MemberPageSerializer, 400: BAD_REQUEST},
        summary="Members by id, paged with `after`",
        operation_id="members_list",
    )
    def get(self, request: Request) -> Response:
        query = _query(s.MemberListQuerySerializer, request)
        members = Member.objects.order_by("id")
        if "external_id" in query:
            members = members.filter(external_id=query["external_id"])
        if "after" in query:
            members = members.filter(id__gt=query["after"])
        rows = list(members[: query["limit"] + 1])
        more = len(rows) > query["limit"]
        rows = rows[: query["limit"]]
        return Response(
            {
                "results": s.MemberSerializer(rows, many=True).data,
                "next": rows[-1].id if more else None,
            }
        )

    @extend_schema(
        request=s.MemberCreateSerializer,
        responses={201: s.MemberSerializer, 400: BAD_REQUEST, 403: DENIED},
        summary="Create a member (planned into the open slices at once)",
    )
    def post(self, request: Request) -> Response:
        data = _body(s.MemberCreateSerializer, request).validated_data
        member = member_create(external_id=data["external_id"])
        return Response(s.MemberSerializer(member).data, status=status.HTTP_201_CREATED)


class MemberDetailView(EndpointView):
    @extend_schema(responses={200: s.MemberSerializer, 404: NOT_FOUND}, summary="One member")
    def get(self, request: Request, member_id: int) -> Response:
        return Response(s.MemberSerializer(get_object_or_404(Member, id=member_id)).data)


class MemberDeactivateView(EndpointView):
    @_operator_action_schema(
        s.MemberSerializer, "Stop planning a member and cancel its waiting jobs", refusable=False
    )
    def post(self, request: Request, member_id: int) -> Response:
        member = get_object_or_404(Member, id=member_id)
        member = member_deactivate_audited(user=request.user, member=member, via=VIA)
        return Response(s.MemberSerializer(member).data)


class MemberActivateView(EndpointView):
    @_operator_action_schema(s.MemberSerializer, "Plan a member again", refusable=False)
    def post(self, request: Request, member_id: int) -> Response:
        member = get_object_or_404(Member, id=member_id)
        member = member_activate_audited(user=request.user, member=member, via=VIA)
        return Response(s.MemberSerializer(member).data)


class RecurringTaskListView(EndpointView):
    @extend_schema(responses={200: s.RecurringTaskSerializer(many=True)}, summary="Tasks")
    def get(self, request: Request) -> Response:
        tasks = RecurringTask.objects.order_by("name")
        return Response(s.RecurringTaskSerializer(tasks, many=True).data)

    @extend_schema(
        request=s.RecurringTaskCreateSerializer,
        responses={201: s.RecurringTaskSerializer, 400: BAD_REQUEST, 403: DENIED},
        summary="Create a recurring task",
    )
    def post(self, request: Request) -> Response:
        serializer = _body(s.RecurringTaskCreateSerializer, request)
        task = recurring_task_create(**serializer.service_arguments())
        return Response(s.RecurringTaskSerializer(task).data, status=status.HTTP_201_CREATED)


class RecurringTaskDetailView(EndpointView):
    @extend_schema(responses={200: s.RecurringTaskSerializer, 404: NOT_FOUND}, summary="A task")
    def get(self, request: Request, task_id: int) -> Response:
        task = get_object_or_404(RecurringTask, id=task_id)
        return Response(s.RecurringTaskSerializer(task).data)


class RecurringTaskPauseView(EndpointView):
    @_operator_action_schema(
        s.RecurringTaskSerializer, "Pause planning (jobs already planned still run)"
    )
    def post(self, request: Request, task_id: int) -> Response:
        task = recurring_task_pause_audited(user=request.user, task_id=task_id, via=VIA)
        return Response(s.RecurringTaskSerializer(task).data)


class RecurringTaskResumeView(EndpointView):
    @_operator_action_schema(s.RecurringTaskSerializer, "Resume planning from the next slice")
    def post(self, request: Request, task_id: int) -> Response:
        task = recurring_task_resume_audited(user=request.user, task_id=task_id, via=VIA)
        return Response(s.RecurringTaskSerializer(task).data)


class MemberNextRunsView(EndpointView):
    @extend_schema(
        responses={200: s.NextRunsSerializer, 404: NOT_FOUND},
        summary="A member's next runs of a task (computed by the formula)",
    )
    def get(self, request: Request, task_id: int, member_id: int) -> Response:
        task = get_object_or_404(RecurringTask, id=task_id)
        member = get_object_or_404(Member, id=member_id)
        _, runs = member_runs_for_task(task=task, external_id=member.external_id)
        return Response({"member": member.external_id, "runs": runs})


def _queue_answer(name: str) -> dict:
    return next(row for row in queues_overview()["queues"] if row["name"] == name)


def _routing_answer() -> dict:
    state = routing_state()
    return s.RoutingSerializer(asdict(state) | {"active": state.active}).data


class QueueListView(EndpointView):
    @extend_schema(responses={200: s.QueueSerializer(many=True)}, summary="Queues, unserved first")
    def get(self, request: Request) -> Response:
        return Response(s.QueueSerializer(queues_overview()["queues"], many=True).data)


class QueueDetailView(EndpointView):
    @extend_schema(
        request=s.QueueSettingsSerializer,
        responses={200: s.QueueSerializer, 400: BAD_REQUEST, 403: DENIED},
        summary="Change a queue's settings (pause, limits; null removes a limit)",
    )
    def patch(self, request: Request, name: str) -> Response:
        settings = _body(s.QueueSettingsSerializer, request).validated_data
        queue = queue_configure_audited(user=request.user, name=name, via=VIA, **settings)
        return Response(_queue_answer(queue.name))


class QueuePauseView(EndpointView):
    @_operator_action_schema(s.QueueSerializer, "Pause a queue (its running jobs finish)")
    def post(self, request: Request, name: str) -> Response:
        queue = queue_pause_audited(user=request.user, name=name, via=VIA)
        return Response(_queue_answer(queue.name))


class QueueResumeView(EndpointView):
    @_operator_action_schema(s.QueueSerializer, "Resume a paused queue")
    def post(self, request: Request, name: str) -> Response:
        queue = queue_resume_audited(user=request.user, name=name, via=VIA)
        return Response(_queue_answer(queue.name))


class RoutingView(EndpointView):
    @extend_schema(responses={200: s.RoutingSerializer}, summary="The routing mode, and why")
    def get(self, request: Request) -> Response:
        return Response(_routing_answer())


class RoutingDegradeView(EndpointView):
    @_operator_action_schema(
        s.RoutingSerializer, "Degraded mode on: only critical jobs", request=s.DegradeSerializer
    )
    def post(self, request: Request) -> Response:
        data = _body(s.DegradeSerializer, request).validated_data
        routing_degrade_audited(user=request.user, via=VIA, **data)
        return Response(_routing_answer())


class RoutingRestoreView(EndpointView):
    @_operator_action_schema(s.RoutingSerializer, "Degraded mode off", refusable=False)
    def post(self, request: Request) -> Response:
        routing_restore_audited(user=request.user, via=VIA)
        return Response(_routing_answer())
