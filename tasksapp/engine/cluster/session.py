"""The cluster's own sessions: long-lived, direct connections that hold advisory locks
and LISTEN, past any transaction pooler."""

from __future__ import annotations

from typing import Any

import environ
from django.conf import settings as django_settings

from tasksapp.engine.db import tempo_connection
from tasksapp.engine.settings import tempo_settings


def session_connection_params() -> dict[str, Any]:
    """Connection parameters for a dispatcher's own sessions (advisory locks, LISTEN):
    those of Tempo's database (TEMPO_DATABASE), or, when set, of TEMPO_SESSION_DATABASE_URL
    — a direct connection past a transaction pooler, which can hold neither. Keepalives
    included."""
    params = tempo_connection().get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    url = tempo_settings().session_database_url
    if url:
        direct = environ.Env.db_url_config(url)
        params.update(
            dbname=direct["NAME"],
            user=direct["USER"],
            password=direct["PASSWORD"],
            host=direct["HOST"],
            port=direct["PORT"] or 5432,
        )
        params["options"] = getattr(django_settings, "TEMPO_DB_SERVER_OPTIONS", "")
    return {key: value for key, value in params.items() if value not in (None, "")}
