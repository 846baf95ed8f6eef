"""The OpenAPI schema (drf-spectacular) describes the JSON API under /api/ only."""

from __future__ import annotations


def api_endpoints_only(endpoints, **kwargs):
    """Preprocessing hook: leaves out /metrics (Prometheus' text format, no serializer),
    which the generator would otherwise skip with a warning in `check --deploy`."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith("/api/")]
