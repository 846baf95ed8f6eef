"""Service errors become 400 answers with the field they are about; nothing the client
sends may produce a 500."""

from __future__ import annotations

import re

from django.db import DataError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from tasksapp.engine.services import IdempotencyConflict, JobInputError
from tasksapp.graphs.services import GraphInputError
from tasksapp.recurring.services import PlanningInputError
from tasksapp.web.operators import OperatorPermissionError
from tasksapp.web.selectors.jobs import JobFilterError

ERR_DATA = "a value is out of range for the database: {reason}"
NOT_FOUND_RE = re.compile(r"\bdoes not exist\b")
FIELD_RE = re.compile(r"^([a-z_]+)[ .]")
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
    )
} | {"period": "period_seconds"}
# The same for graph_job_schedule's messages; a planner's "no plan" is about `wants`.
GRAPH_FIELDS = {
    name: name for name in ("has", "wants", "strategy", "max_restarts", "max_task_attempts")
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
    return drf_exception_handler(exc, context)
