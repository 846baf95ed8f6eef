"""Audiences: who a recurring task runs for, as a queryset of the host's own objects.

An audience is either an installed model by its label (``"auth.User"``) with a filter of
field lookups (``{"is_active": True}``, relations allowed: ``{"groups__name": "beta"}``),
or the dotted name of a function registered with ``@audience`` that returns a queryset
(the filter, if any, applies on top of it). Members follow their audience: see
recurring.services.audiences.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.core.exceptions import FieldError, ValidationError
from django.db.models import Model, QuerySet

from tasksapp.engine.db import tempo_alias

ERR_AUDIENCE = (
    "audience must be an installed model's label ('app_label.ModelName', e.g. 'auth.User') "
    "or the dotted name of a function registered with @audience (got {value!r})."
)
ERR_AUDIENCE_FILTER = (
    "audience_filter must be a JSON object of field lookups of {model} (e.g. "
    '{{"is_active": true}}): {reason}'
)
ERR_AUDIENCE_FILTER_WITHOUT = "audience_filter needs an audience."
ERR_AUDIENCE_FUNCTION = "the audience function {name!r} must return a QuerySet (got {kind})."
ERR_AUDIENCE_NAME = "@audience needs a function with a dotted name (module.function)."
ERR_AUDIENCE_DUPLICATE = "audience name {name!r} is already registered for another function."
ERR_AUDIENCE_PK = "the audience's model {model} has a primary key longer than 64 characters."
ERR_AUDIENCE_DATABASE = (
    "the audience's model {model} is read from the database {database!r}, Tempo's tables are "
    "on {tempo!r} (TEMPO_DATABASE): planning joins the audience with Tempo's tables in one "
    "query, so an audience must be on Tempo's database. Plain member tasks work anywhere."
)

MAX_KEY_CHARS = 64  # Member.object_id

_functions: dict[str, Callable[[], QuerySet]] = {}
_lock = threading.Lock()


class AudienceError(ValueError):
    """A bad audience or audience filter; the message says what to fix."""


class AudienceDatabaseError(AudienceError):
    """An audience read from another database than Tempo's."""


def audience(func: Callable[[], QuerySet] | None = None, *, name: str | None = None):
    """Register a function returning a queryset as an audience, under its dotted name
    (``module.function``) or `name`: ``@audience`` or ``@audience(name="beta_users")``."""

    def register(f: Callable[[], QuerySet]) -> Callable[[], QuerySet]:
        key = name or f"{f.__module__}.{f.__qualname__}"
        if not callable(f) or "." not in key:
            raise AudienceError(ERR_AUDIENCE_NAME)
        with _lock:
            if _functions.get(key, f) is not f:
                raise AudienceError(ERR_AUDIENCE_DUPLICATE.format(name=key))
            _functions[key] = f
        return f

    return register(func) if func is not None else register


def audience_unregister(name: str) -> None:
    """Forget a registered audience function (tests)."""
    with _lock:
        _functions.pop(name, None)


def audience_queryset(label: str, filters: dict[str, Any] | None = None) -> QuerySet:
    """The objects of audience `label` (validated) with `filters` applied."""
    if not isinstance(label, str) or not label:
        raise AudienceError(ERR_AUDIENCE.format(value=label))
    function = _functions.get(label)
    if function is not None:
        queryset = function()
        if not isinstance(queryset, QuerySet):
            kind = type(queryset).__name__
            raise AudienceError(ERR_AUDIENCE_FUNCTION.format(name=label, kind=kind))
    else:
        queryset = _model(label)._default_manager.all()
    return _filtered(queryset, filters or {})


def validated_audience(label: Any, filters: Any) -> tuple[str, dict[str, Any]]:
    """The audience and filter to store: the audience resolves and the filter's lookups,
    values and relations are those of its model (the query is compiled, not run)."""
    if label in ("", None):
        if filters not in (None, {}):
            raise AudienceError(ERR_AUDIENCE_FILTER_WITHOUT)
        return "", {}
    if filters is None:
        filters = {}
    queryset = audience_queryset(label, {})
    model = queryset.model._meta.label
    if not isinstance(filters, dict) or not all(isinstance(k, str) for k in filters):
        raise AudienceError(ERR_AUDIENCE_FILTER.format(model=model, reason="not an object."))
    try:
        json.dumps(filters, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise AudienceError(ERR_AUDIENCE_FILTER.format(model=model, reason=exc)) from exc
    queryset = _filtered(queryset, filters)
    try:
        str(queryset.values("pk").query)  # compiles every lookup and value
    except (FieldError, ValidationError, ValueError, TypeError) as exc:
        raise AudienceError(ERR_AUDIENCE_FILTER.format(model=model, reason=exc)) from exc
    pk = queryset.model._meta.pk
    if getattr(pk, "max_length", None) and pk.max_length > MAX_KEY_CHARS:
        raise AudienceError(ERR_AUDIENCE_PK.format(model=model))
    check_same_database(queryset)
    return label, filters


def check_same_database(queryset: QuerySet) -> None:
    """AudienceDatabaseError unless the audience is read from Tempo's database."""
    if queryset.db != tempo_alias():
        model = queryset.model._meta.label
        message = ERR_AUDIENCE_DATABASE.format(
            model=model, database=queryset.db, tempo=tempo_alias()
        )
        raise AudienceDatabaseError(message)


def audience_model(label: str) -> type[Model]:
    return audience_queryset(label, {}).model


def _model(label: str) -> type[Model]:
    try:
        return apps.get_model(label)
    except (LookupError, ValueError) as exc:
        raise AudienceError(ERR_AUDIENCE.format(value=label)) from exc


def _filtered(queryset: QuerySet, filters: dict[str, Any]) -> QuerySet:
    model = queryset.model._meta.label
    try:
        return queryset.filter(**filters) if filters else queryset
    except (FieldError, ValidationError, ValueError, TypeError) as exc:
        raise AudienceError(ERR_AUDIENCE_FILTER.format(model=model, reason=exc)) from exc
