"""Handlers: callables referenced by dotted path, called with one JobContext."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from django.utils.module_loading import import_string

ERR_HANDLER_PATH = "handler must be a dotted path such as 'package.module.function'."
ERR_HANDLER_IMPORT = "handler '{path}' cannot be imported: {reason}"
ERR_HANDLER_CALLABLE = "handler '{path}' is not callable."


class HandlerError(ValueError):
    pass


@dataclass(frozen=True)
class JobContext:
    """What a handler is given: enough to be idempotent towards outside systems."""

    job_id: int
    payload: Any
    attempt: int
    idempotency_key: str
    run_at: dt.datetime
    delivery: str
    max_attempts: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts


@lru_cache(maxsize=1024)
def resolve_handler(path: str) -> Callable[[JobContext], Any]:
    """Import and return the handler at ``path``; raise HandlerError with a clear reason."""
    if not isinstance(path, str) or "." not in path or path.startswith(".") or " " in path:
        raise HandlerError(ERR_HANDLER_PATH)
    try:
        target = import_string(path)
    except ImportError as exc:
        raise HandlerError(ERR_HANDLER_IMPORT.format(path=path, reason=exc)) from exc
    if not callable(target):
        raise HandlerError(ERR_HANDLER_CALLABLE.format(path=path))
    return target
