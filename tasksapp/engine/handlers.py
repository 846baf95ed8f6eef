"""Handlers: callables declared with ``@job_handler``, called with one JobContext.

Only declared handlers run. A job names its handler by the name it was registered under
(by default the function's dotted path, ``package.module.function``); the name is looked
up in the registry and never imported, so nothing a caller sends can make a process
import a module or call an arbitrary function (``os.system``, ``sys.exit``).

Every process registers the same handlers at start-up (``TasksappConfig.ready``): Tempo's
own (the graph runner's, the planner's), the ``job_handlers`` module of each installed
app, and the modules listed in the ``TEMPO_HANDLER_MODULES`` setting, which adds to
Tempo's own and never replaces them.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from importlib import import_module
from typing import Any

from tasksapp.engine.ages import RetentionAgesError, retention_ages

ERR_HANDLER_PATH = "handler must be a dotted name such as 'package.module.function'."
ERR_HANDLER_UNKNOWN = (
    "handler '{name}' is not registered. Declare it with @job_handler "
    "(from tasksapp.engine.handlers import job_handler) in a module listed in "
    "TEMPO_HANDLER_MODULES or in an installed app's job_handlers module. "
    "Registered handlers: {known}."
)
ERR_HANDLER_CALLABLE = "@job_handler needs a callable, not {kind}."
ERR_HANDLER_DUPLICATE = "handler name '{name}' is already registered for another function."

ERR_HANDLER_MODULE = (
    "{setting} lists '{module}', which cannot be imported: {reason}. List importable "
    "modules (dotted paths) that declare handlers."
)

APP_HANDLER_MODULE = "job_handlers"
# Tempo's own handlers, registered whatever a project lists (the graph runner registers
# its handlers when it is imported, in TasksappConfig.ready).
OWN_HANDLER_MODULES = ("tasksapp.recurring.handlers",)
MAX_NAME_LENGTH = 200
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
LISTED_IN_ERROR = 20  # registered names quoted in an unknown-handler error


# A snooze moves the job's run time at most this far ahead (and never back).
MAX_SNOOZE_SECONDS = 30 * 24 * 3600
ERR_SNOOZE = "Snooze(seconds): seconds must be a number between 0 and {most} (got {got!r})."


class HandlerError(ValueError):
    pass


class JobCancelled(Exception):  # noqa: N818 - raised by a handler, read as what happened
    """Raised by ``ctx.raise_if_cancelled()``: an operator cancelled the running job. The
    job ends ``cancelled`` (a transactional handler's effects roll back)."""


class Snooze(Exception):  # noqa: N818 - ``raise Snooze(60)`` reads as what it does
    """``raise Snooze(seconds)`` from a handler: run again `seconds` from now, without
    using up an attempt (a transactional handler's effects roll back)."""

    def __init__(self, seconds: float) -> None:
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if not number or not math.isfinite(seconds) or not 0 <= seconds <= MAX_SNOOZE_SECONDS:
            raise ValueError(ERR_SNOOZE.format(most=MAX_SNOOZE_SECONDS, got=seconds))
        super().__init__(f"snoozed for {seconds:g} s")
        self.seconds = float(seconds)


@dataclass(frozen=True)
class JobContext:
    """What a handler is given: enough to be idempotent towards outside systems, and
    whether an operator asked to cancel the job while it runs (a long handler polls
    ``cancel_requested`` or calls ``raise_if_cancelled()`` between steps)."""

    job_id: int
    payload: Any
    attempt: int
    idempotency_key: str
    run_at: dt.datetime
    delivery: str
    max_attempts: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    cancel_event: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_event.is_set()

    def raise_if_cancelled(self) -> None:
        if self.cancel_event.is_set():
            raise JobCancelled(f"job {self.job_id} was cancelled while it ran")

    @property
    def member_object(self) -> Any:
        """The object a recurring job runs for, loaded on first use
        (tasksapp.recurring.member_objects); JobCancelled if it left its audience."""
        if "member_object" not in self.extra:
            self.extra["member_object"] = member_object_loader(self)
        return self.extra["member_object"]


def _no_member_objects(ctx: JobContext) -> Any:
    raise LookupError("recurring work is not loaded: no member objects")


# Set by tasksapp.recurring (which the engine does not import) when it is loaded.
member_object_loader: Callable[[JobContext], Any] = _no_member_objects

# Checks the worker runs just before each handler, registered by features the engine does
# not import (a recurring job whose member left its audience). One that raises
# JobCancelled(reason) ends the job cancelled with that reason, its handler never called.
# Each returns at once for jobs that are not its own, deciding from the context alone.
_before_handler: list[Callable[[JobContext], None]] = []


def register_before_handler(check: Callable[[JobContext], None]) -> None:
    if check not in _before_handler:
        _before_handler.append(check)


def run_before_handler_checks(ctx: JobContext) -> None:
    for check in _before_handler:
        check(ctx)


Handler = Callable[[JobContext], Any]


def is_handler_name(name: Any) -> bool:
    """A dotted name of identifiers: the only shape a registered name can have."""
    return isinstance(name, str) and len(name) <= MAX_NAME_LENGTH and bool(_NAME.fullmatch(name))


class HandlerRegistry:
    """Handlers by name. Registering the same function under its name again is a no-op."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._retention: dict[str, dict[str, float]] = {}
        self._own_transaction: set[str] = set()
        self._lock = threading.Lock()

    def register(
        self,
        func: Handler,
        *,
        name: str | None = None,
        retention: dict | None = None,
        own_transaction: bool = False,
    ) -> Handler:
        if not callable(func):
            raise HandlerError(ERR_HANDLER_CALLABLE.format(kind=type(func).__name__))
        name = name or f"{func.__module__}.{func.__qualname__}"
        if not is_handler_name(name):
            raise HandlerError(ERR_HANDLER_PATH)
        ages = _validated_ages(retention)
        with self._lock:
            existing = self._handlers.get(name)
            if existing is not None and _origin(existing) != _origin(func):
                raise HandlerError(ERR_HANDLER_DUPLICATE.format(name=name))
            self._handlers[name] = func
            self._retention.pop(name, None)
            if ages:
                self._retention[name] = ages
            if own_transaction:
                self._own_transaction.add(name)
            else:
                self._own_transaction.discard(name)
        return func

    def owns_transaction(self, name: str) -> bool:
        """Whether the handler's jobs each commit alone (never in a transactional group)."""
        return name in self._own_transaction

    def unregister(self, name: str) -> None:
        with self._lock:
            self._handlers.pop(name, None)
            self._retention.pop(name, None)
            self._own_transaction.discard(name)

    def retention(self) -> dict[str, dict[str, float]]:
        """The handlers declared with their own retention ages: name → days per state."""
        with self._lock:
            return {name: dict(ages) for name, ages in self._retention.items()}

    def get(self, name: Any) -> Handler:
        """The handler registered as ``name``; HandlerError saying how to register it."""
        handler = self._handlers.get(name) if isinstance(name, str) else None
        if handler is not None:  # registered, so well formed: checked once, by register
            return handler
        if not is_handler_name(name):
            raise HandlerError(ERR_HANDLER_PATH)
        raise HandlerError(ERR_HANDLER_UNKNOWN.format(name=name, known=self._known(name)))

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._handlers))

    def __len__(self) -> int:
        return len(self._handlers)

    def _known(self, asked: str) -> str:
        """The registered names, those most like the name asked for first (a typo's
        intended handler leads the list)."""
        names = sorted(self._handlers, key=lambda n: (-SequenceMatcher(None, asked, n).ratio(), n))
        shown = ", ".join(names[:LISTED_IN_ERROR]) or "none"
        more = len(names) - LISTED_IN_ERROR
        return f"{shown} and {more} more" if more > 0 else shown


def _validated_ages(retention: Any) -> dict[str, float]:
    try:
        return retention_ages(retention)
    except RetentionAgesError as exc:
        raise HandlerError(str(exc)) from exc


def _origin(func: Handler) -> tuple[str, str]:
    """Where a function was defined: a module imported twice re-registers the same one."""
    return getattr(func, "__module__", ""), getattr(func, "__qualname__", repr(func))


registry = HandlerRegistry()


def job_handler(
    func: Handler | None = None,
    *,
    name: str | None = None,
    retention: dict | None = None,
    own_transaction: bool = False,
):
    """Declare a handler: ``@job_handler`` (named by its dotted path) or
    ``@job_handler(name="billing.charge", retention={"succeeded": 90})`` — its finished
    jobs kept that many days per state instead of the defaults (docs/OPERATIONS.md).

    A transactional job shares its transaction with the next jobs of its batch (each in a
    savepoint); ``own_transaction=True`` gives each of the handler's jobs a transaction of
    its own, for handlers that lock rows other jobs lock too (a shared transaction holds
    those locks until the group commits)."""

    def decorate(target: Handler) -> Handler:
        return registry.register(
            target, name=name, retention=retention, own_transaction=own_transaction
        )

    return decorate if func is None else decorate(func)


def owns_transaction(name: str) -> bool:
    return registry.owns_transaction(name)


def resolve_handler(name: Any) -> Handler:
    """The registered handler called ``name``; HandlerError if there is none."""
    return registry.get(name)


def handler_modules() -> list[str]:
    """The modules that declare handlers, in the order they are imported."""
    from django.apps import apps
    from django.conf import settings
    from django.utils.module_loading import module_has_submodule

    modules = list(OWN_HANDLER_MODULES)
    modules += [
        f"{config.name}.{APP_HANDLER_MODULE}"
        for config in apps.get_app_configs()
        if module_has_submodule(config.module, APP_HANDLER_MODULE)
    ]
    modules += list(getattr(settings, "TEMPO_HANDLER_MODULES", []))
    return list(dict.fromkeys(modules))


def import_listed_modules(modules: list[str], *, setting: str) -> None:
    """Import modules a setting lists; one that is missing is a configuration error
    naming it (an import error inside a module that exists is raised as it is)."""
    from django.core.exceptions import ImproperlyConfigured

    for module in modules:
        try:
            import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module + ".").startswith(exc.name + "."):
                raise
            reason = f"no module named '{exc.name}'"
            raise ImproperlyConfigured(
                ERR_HANDLER_MODULE.format(setting=setting, module=module, reason=reason)
            ) from exc


def load_handler_modules() -> list[str]:
    """Import every handler module (at start-up, from configuration, never from input)."""
    modules = handler_modules()
    import_listed_modules(modules, setting="TEMPO_HANDLER_MODULES")
    return modules
