"""Request helpers named by the settings: the client's address behind trusted proxies
(login lockout and API throttling) and the page a locked-out login gets (django-axes)."""

from __future__ import annotations

import math

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, or, with TEMPO_PROXY_COUNT = n > 0 trusted
    proxies in front, the address the outermost of them saw (the n-th entry of
    X-Forwarded-For from the right; the entries left of it are the client's own claims).
    The same rule as the API throttles' (REST_FRAMEWORK NUM_PROXIES)."""
    remote = request.META.get("REMOTE_ADDR")
    count = settings.TEMPO_PROXY_COUNT
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    addresses = [part.strip() for part in forwarded.split(",") if part.strip()]
    if count <= 0 or not addresses:
        return remote
    return addresses[-min(count, len(addresses))]


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials=None
) -> HttpResponse:
    """429 with the lockout page (dashboard and admin login) and a Retry-After."""
    from axes.helpers import get_client_username, get_cool_off, get_failure_limit

    cool_off = get_cool_off(request)
    seconds = int(cool_off.total_seconds()) if cool_off else 0
    context = {
        "username": get_client_username(request, credentials) or "",
        "failure_limit": get_failure_limit(request, credentials),
        "minutes": max(1, math.ceil(seconds / 60)),
    }
    response = render(
        request, "tempo/locked_out.html", context, status=settings.AXES_HTTP_RESPONSE_CODE
    )
    if seconds:
        response["Retry-After"] = str(seconds)
    return response
