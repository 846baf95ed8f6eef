"""Graph tasks: callables declared with what they need, produce and consume.

A graph task is a plain function ``func(inputs: dict) -> dict``. It is registered with

- ``requires``: propositions that must hold before it runs; their values are its inputs;
- ``provides``: propositions that hold afterwards; the returned dict has one value for each;
- ``consumes``: propositions that no longer hold afterwards (negative effects);
- ``optional``: names passed in when the job's ``has`` carries them (settings such as
  ``latency_scale``); never planned for;
- ``rescue(inputs, error) -> dict | None``: run after a failure, before a retry; a dict it
  returns replaces those inputs for the retry (a refreshed token, say);
- ``rollback(inputs, outputs) -> None``: undoes a completed run (rollback strategy).

Tasks live in a :class:`Registry` under a unique name, by default the function's dotted
path. The registry is pure Python: :func:`autodiscover_graph_tasks` is the only part that
knows about Django.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

NEGATION = "¬"

ERR_DUPLICATE = "graph task {name!r} is already registered with a different definition."
ERR_UNKNOWN = "no graph task named {name!r}."
ERR_NAMES = "{field} of graph task {name!r} must be a list of proposition names."
ERR_PROPOSITION = "{field} of graph task {name!r} has an invalid proposition name: {prop!r}."
ERR_NO_PROVIDES = "graph task {name!r} must provide at least one proposition."
ERR_PROVIDES_CONSUMES = "graph task {name!r} both provides and consumes {props}."
ERR_NOT_CALLABLE = "{field} of graph task {name!r} must be callable."
ERR_OUTPUT_TYPE = "graph task {name!r} must return a dict, not {kind}."
ERR_OUTPUT_MISSING = "graph task {name!r} did not return {props}."

TaskFunc = Callable[[dict[str, Any]], Mapping[str, Any]]
RescueFunc = Callable[[dict[str, Any], BaseException], Mapping[str, Any] | None]
RollbackFunc = Callable[[dict[str, Any], dict[str, Any]], None]


class GraphTaskError(ValueError):
    pass


def _quoted(props: Iterable[str]) -> str:
    return ", ".join(repr(p) for p in sorted(props))


def _is_proposition(prop: Any) -> bool:
    return (
        isinstance(prop, str)
        and bool(prop)
        and not prop.startswith(NEGATION)
        and not any(c.isspace() for c in prop)
    )


def _propositions(value: Any, *, field: str, name: str) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise GraphTaskError(ERR_NAMES.format(field=field, name=name))
    props = tuple(value)
    for prop in props:
        if not _is_proposition(prop):
            raise GraphTaskError(ERR_PROPOSITION.format(field=field, name=name, prop=prop))
    return frozenset(props)


def _path(obj: Callable | None) -> str | None:
    if obj is None:
        return None
    return f"{obj.__module__}.{obj.__qualname__}"


@dataclass(frozen=True)
class TaskSpec:
    """One registered task: an action of the planning domain and a callable to run."""

    name: str
    func: TaskFunc = field(compare=False)
    requires: frozenset[str]
    provides: frozenset[str]
    consumes: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()
    rescue: RescueFunc | None = field(default=None, compare=False)
    rollback: RollbackFunc | None = field(default=None, compare=False)

    @property
    def definition(self) -> tuple:
        """Everything that identifies the task, as plain data (callables by dotted path)."""
        return (
            self.name,
            sorted(self.requires),
            sorted(self.provides),
            sorted(self.consumes),
            sorted(self.optional),
            [_path(self.func), _path(self.rescue), _path(self.rollback)],
        )

    def check_outputs(self, outputs: Any) -> dict[str, Any]:
        """Return the provided values from ``outputs`` or raise GraphTaskError."""
        if not isinstance(outputs, Mapping):
            raise GraphTaskError(ERR_OUTPUT_TYPE.format(name=self.name, kind=type(outputs)))
        missing = self.provides - set(outputs)
        if missing:
            raise GraphTaskError(ERR_OUTPUT_MISSING.format(name=self.name, props=_quoted(missing)))
        return {prop: outputs[prop] for prop in self.provides}

    def call(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Run the task on ``inputs`` and return exactly its provided values."""
        return self.check_outputs(self.func(dict(inputs)))


def task_spec(
    func: TaskFunc,
    *,
    requires: Iterable[str],
    provides: Iterable[str],
    consumes: Iterable[str] = (),
    optional: Iterable[str] = (),
    rescue: RescueFunc | None = None,
    rollback: RollbackFunc | None = None,
    name: str | None = None,
) -> TaskSpec:
    """Validate a declaration and return its TaskSpec; raise GraphTaskError if invalid."""
    name = name or _path(func)
    for label, hook in (("func", func), ("rescue", rescue), ("rollback", rollback)):
        if hook is not None and not callable(hook):
            raise GraphTaskError(ERR_NOT_CALLABLE.format(field=label, name=name))
    spec = TaskSpec(
        name=name,
        func=func,
        requires=_propositions(requires, field="requires", name=name),
        provides=_propositions(provides, field="provides", name=name),
        consumes=_propositions(consumes, field="consumes", name=name),
        optional=_propositions(optional, field="optional", name=name),
        rescue=rescue,
        rollback=rollback,
    )
    if not spec.provides:
        raise GraphTaskError(ERR_NO_PROVIDES.format(name=name))
    if spec.provides & spec.consumes:
        overlap = _quoted(spec.provides & spec.consumes)
        raise GraphTaskError(ERR_PROVIDES_CONSUMES.format(name=name, props=overlap))
    return spec


@dataclass(frozen=True)
class RegistrySnapshot:
    """An immutable copy of a registry; equal and hashed by fingerprint (a cache key)."""

    fingerprint: str
    specs: tuple[TaskSpec, ...] = field(compare=False)


class Registry:
    """Graph tasks by name. Registering the same definition again is a no-op."""

    def __init__(self, specs: Iterable[TaskSpec] = ()) -> None:
        self._specs: dict[str, TaskSpec] = {}
        self._snapshot: RegistrySnapshot | None = None
        for spec in specs:
            self.register(spec)

    def register(self, spec: TaskSpec) -> TaskSpec:
        existing = self._specs.get(spec.name)
        if existing is not None:
            if existing.definition != spec.definition:
                raise GraphTaskError(ERR_DUPLICATE.format(name=spec.name))
            return existing
        self._specs[spec.name] = spec
        self._snapshot = None
        return spec

    def task(self, **declaration: Any) -> Callable[[TaskFunc], TaskFunc]:
        """Decorator form of :meth:`register`; takes the keyword arguments of task_spec."""

        def decorate(func: TaskFunc) -> TaskFunc:
            func.graph_task = self.register(task_spec(func, **declaration))
            return func

        return decorate

    def get(self, name: str) -> TaskSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise GraphTaskError(ERR_UNKNOWN.format(name=name)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[TaskSpec]:
        return iter(sorted(self._specs.values(), key=lambda spec: spec.name))

    def __len__(self) -> int:
        return len(self._specs)

    def snapshot(self) -> RegistrySnapshot:
        if self._snapshot is None:
            specs = tuple(self)
            text = json.dumps([spec.definition for spec in specs])
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            self._snapshot = RegistrySnapshot(fingerprint=digest, specs=specs)
        return self._snapshot

    def fingerprint(self) -> str:
        return self.snapshot().fingerprint


default_registry = Registry()


def graph_task(
    *,
    requires: Iterable[str],
    provides: Iterable[str],
    consumes: Iterable[str] = (),
    optional: Iterable[str] = (),
    rescue: RescueFunc | None = None,
    rollback: RollbackFunc | None = None,
    name: str | None = None,
    registry: Registry | None = None,
) -> Callable[[TaskFunc], TaskFunc]:
    """Register the decorated function as a graph task (in the default registry)."""
    target = default_registry if registry is None else registry
    return target.task(
        requires=requires,
        provides=provides,
        consumes=consumes,
        optional=optional,
        rescue=rescue,
        rollback=rollback,
        name=name,
    )


def autodiscover_graph_tasks() -> list[str]:
    """Import ``<app>.graph_tasks`` of every installed app and TEMPO_GRAPH_TASK_MODULES."""
    from importlib import import_module

    from django.apps import apps
    from django.conf import settings
    from django.utils.module_loading import module_has_submodule

    modules = [
        f"{config.name}.graph_tasks"
        for config in apps.get_app_configs()
        if module_has_submodule(config.module, "graph_tasks")
    ]
    modules += list(getattr(settings, "TEMPO_GRAPH_TASK_MODULES", []))
    for module in modules:
        import_module(module)
    return modules
