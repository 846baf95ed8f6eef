"""API endpoint on many members at once: delete, deactivate or activate them by id, in
one request, recorded as one operator action (tasksapp.web.member_batches)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from tasksapp.recurring.services import PlanningInputError
from tasksapp.web.member_batches import MEMBER_BATCH_ACTIONS, member_batch_audited
from tasksapp.web.models import OperatorAction

from .base import TempoAPIView

MAX_REQUEST_IDS = 10_000  # a request stays short; send more in several
MAX_ID = 2**63 - 1


class MemberBatchSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=sorted(MEMBER_BATCH_ACTIONS))
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID),
        min_length=1,
        max_length=MAX_REQUEST_IDS,
        help_text=f"Member ids, 1 to {MAX_REQUEST_IDS:,}; ids not found are skipped.",
    )


class MemberBatchResultSerializer(serializers.Serializer):
    action = serializers.CharField()
    members = serializers.IntegerField(
        help_text="Members changed (not found, or in that state already: skipped)."
    )
    jobs = serializers.IntegerField(
        help_text="Their jobs cancelled (delete, deactivate) or scheduled again (activate)."
    )


class MemberBatchView(TempoAPIView):
    @extend_schema(
        request=MemberBatchSerializer,
        responses={
            200: MemberBatchResultSerializer,
            400: OpenApiResponse(description="Field errors: {field: [message]}."),
            403: OpenApiResponse(description="Not allowed for this user's role."),
        },
        summary="Delete, deactivate or activate many members (their waiting jobs with them)",
    )
    def post(self, request: Request) -> Response:
        serializer = MemberBatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            result = member_batch_audited(
                user=request.user,
                via=OperatorAction.Via.API,
                action=data["action"],
                member_ids=data["ids"],
            )
        except PlanningInputError as exc:
            raise ValidationError({"ids": [str(exc)]}) from exc
        answer = {"action": data["action"], "members": result.members, "jobs": result.jobs}
        return Response(MemberBatchResultSerializer(answer).data)
