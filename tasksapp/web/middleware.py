"""Requests refused before any view reads them."""

from __future__ import annotations

from django.http import HttpResponseBadRequest

ERR_NUL = "{name}: control characters (such as NUL) are not allowed."
ADMIN_PREFIX = "/admin/"


class RefuseNulInAdminQuery:
    """The admin passes its filters and search terms to the database as they come, and
    PostgreSQL refuses a NUL in text (a 500). A NUL anywhere in an admin address is a
    400 here. The dashboard and the API check each parameter themselves and answer
    with their own 400 page or JSON body."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith(ADMIN_PREFIX):
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    message = ERR_NUL.format(name=name.replace("\x00", "\\x00"))
                    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
