"""Requests refused before any view reads them."""

from __future__ import annotations

from django.http import HttpResponseBadRequest, JsonResponse

ERR_NUL = "{name}: control characters (such as NUL) are not allowed."
ERR_NUL_PATH = "the address has a NUL character: no page or endpoint has one."
ADMIN_PREFIX = "/admin/"
API_PREFIX = "/api/"


def _bad_request(request, message: str):
    if request.path.startswith(API_PREFIX):  # every API answer is JSON
        return JsonResponse({"detail": message}, status=400)
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


class RefuseNul:
    """PostgreSQL refuses a NUL in text (a 500 where a view passes it on). A NUL in any
    address (`/queues/%00/pause/`) is a 400 here, and so is one anywhere in an admin
    query string: the admin passes its filters and search terms to the database as
    they come. The dashboard and the API check each parameter themselves and answer
    with their own 400 page or JSON body."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path:
            return _bad_request(request, ERR_NUL_PATH)
        if request.path.startswith(ADMIN_PREFIX):
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    message = ERR_NUL.format(name=name.replace("\x00", "\\x00"))
                    return _bad_request(request, message)
        return self.get_response(request)
