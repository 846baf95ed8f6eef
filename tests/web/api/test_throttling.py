"""API throttling: each user (whatever token or session) and each anonymous address has
its own rate; over it the API answers 429 with a JSON body and Retry-After."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.test import APIClient, APIRequestFactory
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

JOBS = "/api/jobs/"


class OpenView(APIView):
    """An endpoint anonymous callers may use, with the default throttles (every API
    endpoint needs a role today; the anonymous rate guards any that will not)."""

    permission_classes = [AllowAny]

    def get(self, request):
        return Response({"ok": True})


@pytest.fixture
def rates(monkeypatch, settings):
    """Small rates for this test. DRF's own throttles read their rates once, at import
    (SimpleRateThrottle.THROTTLE_RATES), so overriding the setting would not reach them;
    Tempo's endpoints read REST_FRAMEWORK's rates at each request (api/base.py)."""
    small = {"user": "3/minute", "anon": "2/minute"}
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", small)
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": small}
    cache.clear()  # this test's own cache (tests/web/conftest.py)
    yield
    cache.clear()


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def test_the_default_rates_come_from_the_settings(settings):
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert rates == {"user": "600/minute", "anon": "60/minute"}
    assert rates == SimpleRateThrottle.THROTTLE_RATES


def test_over_the_rate_is_429_with_json_and_retry_after(rates, viewer):
    client = client_for(viewer)
    assert [client.get(JOBS).status_code for _ in range(3)] == [200, 200, 200]
    response = client.get(JOBS)
    assert response.status_code == 429
    assert response["Content-Type"] == "application/json"
    assert "throttled" in response.json()["detail"]
    assert 0 < int(response["Retry-After"]) <= 60


def test_other_users_are_not_slowed_down(rates, viewer, operator):
    viewer_client = client_for(viewer)
    for _ in range(4):
        viewer_client.get(JOBS)
    assert viewer_client.get(JOBS).status_code == 429
    assert client_for(operator).get(JOBS).status_code == 200


def test_anonymous_callers_have_their_own_rate_per_address(rates, db):
    view = OpenView.as_view()
    factory = APIRequestFactory()
    answers = [view(factory.get("/open/")) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    assert "Retry-After" in answers[-1]
    assert view(factory.get("/open/", REMOTE_ADDR="10.9.8.7")).status_code == 200
