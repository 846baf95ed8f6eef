"""Requests refused before any view reads them."""

from __future__ import annotations

from django.http import HttpResponseBadRequest, JsonResponse

ERR_NUL = "the address has a NUL character (%00), which no parameter may contain"


class RefuseNulInQuery:
    """A NUL in the query string is a 400 everywhere (the admin's filters, the API, the
    dashboard): PostgreSQL refuses it in text, and a filter passed on would be a 500."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        query = request.META.get("QUERY_STRING", "")
        if "%00" in query or "\x00" in query or "\x00" in request.path:
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": ERR_NUL}, status=400)
            return HttpResponseBadRequest(ERR_NUL, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
