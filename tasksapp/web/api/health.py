"""GET /api/health/: 200 while work gets done, 503 when it does not (a queue's oldest due
job waiting past the stall limit, or due work with no live dispatcher or worker).

Anyone may ask (load balancers and container health checks carry no credentials): they
get the verdict only. A user with the viewer role also gets each queue's due jobs and the
age of the oldest, and each dispatcher's and worker's last beat.
"""

from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tasksapp.web.api.base import TempoAPIPolicy
from tasksapp.web.operators import PERM_VIEW
from tasksapp.web.selectors.health import Health, health_read

HEALTHY, UNHEALTHY = 200, 503


def health_answer(health: Health) -> dict:
    """The whole answer, as the viewer role sees it (and `manage.py tempo health`)."""
    return {
        "status": health.status,
        "problems": health.problems,
        "stall_seconds": health.stall_seconds,
        "queues": [asdict(q) for q in health.queues],
        "dispatchers": [asdict(d) for d in health.dispatchers],
        "workers": [asdict(w) for w in health.workers],
    }


class HealthView(TempoAPIPolicy, APIView):
    permission_classes = [AllowAny]

    @extend_schema(
        responses={
            200: OpenApiResponse(description="Healthy"),
            503: OpenApiResponse(description="Stalled, or due work with no live process"),
        },
        summary="Health: due jobs and the age of the oldest per queue, live processes",
    )
    def get(self, request: Request) -> Response:
        health = health_read()
        if request.user.is_authenticated and request.user.has_perm(PERM_VIEW):
            answer = health_answer(health)
        else:  # the verdict only: no queue or process names for strangers
            answer = {"status": health.status, "problems": len(health.problems)}
        return Response(answer, status=HEALTHY if health.healthy else UNHEALTHY)
