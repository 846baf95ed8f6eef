"""Service errors become 400 answers with the field they are about; nothing the client
sends may produce a 500. Every error answer of the API is JSON: DRF's own (404, 405, 415,
parse errors), the services', a body over the limit (413) and, should one happen, an
unexpected exception (500, logged with its traceback; the body says no more)."""

from __future__ import annotations

import logging
import re

from django.core.exceptions import RequestDataTooBig
from django.core.signals import got_request_exception
from django.db import DataError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from tasksapp.engine.jsonvalues import safe_json
from tasksapp.engine.services import IdempotencyConflict, JobInputError
from tasksapp.graphs.services import GraphInputError
from tasksapp.recurring.services import PlanningInputError
from tasksapp.web.operators import OperatorPermissionError
from tasksapp.web.selectors.jobs import JobFilterError

ERR_DATA = "a value is out of range for the database: {reason}"
ERR_TOO_BIG = "the request body is larger than the server accepts (DATA_UPLOAD_MAX_MEMORY_SIZE)"
ERR_INTERNAL = "internal error: the server could not answer this request (it has been logged)"
ERR_NO_ENDPOINT = "no API endpoint at this address: see /api/schema/"
logger = logging.getLogger(__name__)
NOT_FOUND_RE = re.compile(r"\bdoes not exist\b")
FIELD_RE = re.compile(r"^([a-z_]+)[ .:]")
# Fields the services' messages start with, and the API field each belongs to.
FIELDS = {
    name: name
    for name in (
        "handler",
        "run_at",
        "payload",
        "max_attempts",
        "retry_policy",
        "delivery",
        "time_limit",
        "idempotency_key",
        "external_id",
        "external_ids",
        "name",
        "slices",
        "epoch",
        "active",
        "cursor",
        "state",
        "run_at_from",
        "queue",
        "priority",
        "concurrency_key",
        "paused",
        "concurrency_limit",
        "key_concurrency_limit",
        "rate_limit",
        "rate_period",
        "reason",
        "critical_priority",
    )
} | {"period": "period_seconds"}
# The same for graph_job_schedule's messages; a planner's "no plan" is about `wants`.
GRAPH_FIELDS = {
    name: name
    for name in ("has", "wants", "strategy", "max_restarts", "max_task_attempts", "on_complete")
} | {"idempotency": "idempotency_key", "retry_policy": "task_retry_policy"}


def field_errors(message: str) -> dict[str, list[str]]:
    """{field: [message]} when the message starts with a field's name (most service
    messages do), else {"non_field_errors": [message]}."""
    match = FIELD_RE.match(message)
    name = FIELDS.get(match.group(1)) if match else None
    return {name or "non_field_errors": [message]}


def graph_field_errors(exc: GraphInputError) -> dict[str, list[str]]:
    message = str(exc)
    if exc.goals:
        return {"wants": [message]}
    match = FIELD_RE.match(message)
    name = GRAPH_FIELDS.get(match.group(1)) if match else None
    return {name or "non_field_errors": [message]}


def exception_handler(exc, context):
    response = _error_answer(exc, context)
    # A refusal may quote the input back: never with a character the answer cannot encode.
    response.data = safe_json(response.data)
    return response


def _error_answer(exc, context) -> Response:
    if isinstance(exc, IdempotencyConflict):
        body = {"detail": str(exc), "job_id": exc.job_id}
        return Response(body, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, GraphInputError):
        return Response(graph_field_errors(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, JobInputError | PlanningInputError | JobFilterError):
        message = str(exc)
        if NOT_FOUND_RE.search(message) and message.startswith(("job ", "recurring task ")):
            return Response({"detail": message}, status=status.HTTP_404_NOT_FOUND)
        return Response(field_errors(message), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, OperatorPermissionError):
        return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, DataError):
        message = ERR_DATA.format(reason=str(exc).splitlines()[0])
        return Response({"non_field_errors": [message]}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, RequestDataTooBig):  # request.body read past DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response({"detail": ERR_TOO_BIG}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    response = drf_exception_handler(exc, context)
    if response is None:
        return _internal_error(exc, context.get("request"))
    return response


def _internal_error(exc: Exception, request) -> Response:
    """An exception nobody expected: logged with its traceback and announced as Django
    announces one (got_request_exception: error reporting, the test client), answered
    with a JSON 500 that tells nothing about the inside."""
    where = f"{request.method} {request.path}" if request is not None else "?"
    logger.error("unexpected error answering %s", where, exc_info=exc)
    django_request = getattr(request, "_request", None)
    got_request_exception.send(sender=None, request=django_request)
    set_rollback()  # with ATOMIC_REQUESTS, nothing of a failed request is kept
    return Response({"detail": ERR_INTERNAL}, status=status.HTTP_500_INTERNAL_SERVER_ERROR)


@csrf_exempt  # it changes nothing: a token client's write gets this JSON, not a CSRF page
def api_not_found(request: HttpRequest, *args, **kwargs) -> JsonResponse:
    """The answer for an address under /api/ that names no endpoint (route it last)."""
    return JsonResponse({"detail": ERR_NO_ENDPOINT}, status=status.HTTP_404_NOT_FOUND)
