"""What every API endpoint of Tempo's uses, stated on its views rather than taken from the
project's REST_FRAMEWORK setting: inside another project the API keeps its own
authentication (API tokens, then the session), roles, JSON parser, error format, rates
and schema, whatever that project sets for its own APIs."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.openapi import AutoSchema
from rest_framework.authentication import SessionAuthentication
from rest_framework.renderers import JSONRenderer
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle
from rest_framework.views import APIView

from tasksapp.web.api.authentication import ApiTokenAuthentication
from tasksapp.web.api.errors import exception_handler
from tasksapp.web.api.parsers import GuardedJSONParser
from tasksapp.web.api.permissions import ViewOrOperate

# Per user (whichever token or session) and per anonymous address, unless the project's
# REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] says otherwise.
DEFAULT_RATES = {"user": "600/minute", "anon": "60/minute"}


def _rate(scope: str) -> str:
    rates = getattr(settings, "REST_FRAMEWORK", {}).get("DEFAULT_THROTTLE_RATES", {})
    return rates.get(scope) or DEFAULT_RATES[scope]


class TempoUserRateThrottle(UserRateThrottle):
    def get_rate(self) -> str:
        return _rate(self.scope)


class TempoAnonRateThrottle(AnonRateThrottle):
    def get_rate(self) -> str:
        return _rate(self.scope)


class TempoAPIPolicy:
    """The API's policy as class attributes, placed before APIView in a view's bases."""

    authentication_classes = [ApiTokenAuthentication, SessionAuthentication]
    permission_classes = [ViewOrOperate]
    parser_classes = [GuardedJSONParser]
    renderer_classes = [JSONRenderer]
    throttle_classes = [TempoAnonRateThrottle, TempoUserRateThrottle]
    schema = AutoSchema()

    def get_exception_handler(self):
        return exception_handler


class TempoAPIView(TempoAPIPolicy, APIView):
    """The base of an endpoint of Tempo's."""
