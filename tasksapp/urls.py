"""Tempo's URLs, for a project to mount where it likes: `path("tempo/",
include("tasksapp.urls"))` serves the dashboard at /tempo/, the HTTP API at /tempo/api/
and the Prometheus metrics at /tempo/metrics."""

from __future__ import annotations

from django.urls import URLPattern, include, path

from tasksapp.web.api import urls as api_urls
from tasksapp.web.api.base import TempoAPIPolicy
from tasksapp.web.api.metrics import metrics


def _with_tempo_policy(pattern):
    """An API URL whose view is one of Tempo's, answering with Tempo's API policy
    (authentication, roles, parser, errors, rates) rather than the project's defaults."""
    view_class = getattr(pattern.callback, "view_class", None)
    if view_class is None or not view_class.__module__.startswith("tasksapp."):
        return pattern
    if issubclass(view_class, TempoAPIPolicy):
        return pattern
    policed = type(view_class.__name__, (TempoAPIPolicy, view_class), {})
    policed.__module__ = view_class.__module__
    callback = policed.as_view(**(pattern.callback.view_initkwargs or {}))
    return URLPattern(pattern.pattern, callback, pattern.default_args, pattern.name)


api_patterns = [
    _with_tempo_policy(p) if isinstance(p, URLPattern) else p for p in api_urls.urlpatterns
]

urlpatterns = [
    path("api/", include((api_patterns, api_urls.app_name))),
    path("metrics", metrics, name="metrics"),
    path("", include("tasksapp.web.dashboard.urls")),
]
