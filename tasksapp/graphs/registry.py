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

from tasksapp.graphs.grounding import bindings, bound, ground_name, rename, split_ground_name

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
ERR_OPTIONS = "options of graph task {name!r}: {reason}"
ERR_OPTIONS_KEYS = "options of graph task {name!r} may only set {allowed} (got {given})."
# A task's own job options: every JobOptions field but the delivery mode (a task's job is
# transactional: its outcome and the graph's next step commit together).
TASK_OPTION_FIELDS = (
    "max_attempts",
    "retry_policy",
    "time_limit",
    "queue",
    "priority",
    "concurrency_key",
)
ERR_PARAMS = (
    "params of graph task {name!r} must map parameter names (identifiers) to object types"
    " (identifiers), or list parameter names (each its own type)."
)

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
    # (name, object type) of each parameter: the task is grounded over the job's objects
    params: tuple[tuple[str, str], ...] = ()
    # Its own job options (tasksapp.engine.options.JobOptions), applied before the graph's
    # strategy: runs of the task (max_attempts, retry_policy) and its time_limit
    options: Any = field(default=None, compare=False)

    @property
    def definition(self) -> tuple:
        """Everything that identifies the task, as plain data (callables by dotted path)."""
        definition = (
            self.name,
            sorted(self.requires),
            sorted(self.provides),
            sorted(self.consumes),
            sorted(self.optional),
            [_path(self.func), _path(self.rescue), _path(self.rollback)],
        )
        if self.params:
            definition = (*definition, [list(p) for p in self.params])
        if self.options is not None:
            definition = (*definition, sorted(self.options.as_fields().items()))
        return definition

    def ground(self, binding: Mapping[str, str]) -> TaskSpec:
        """The task with its parameters bound to objects: ``fetch_posts(google)``."""
        to_ground = {
            prop: bound(prop, binding) for prop in self.requires | self.provides | self.consumes
        }
        to_template = {ground: prop for prop, ground in to_ground.items()}
        func, rescue, rollback = self.func, self.rescue, self.rollback

        def run(inputs: dict[str, Any]) -> Any:
            outputs = func({**rename(inputs, to_template), **binding})
            return rename(outputs, to_ground) if isinstance(outputs, Mapping) else outputs

        def rescue_ground(inputs: dict[str, Any], error: BaseException) -> Any:
            replaced = rescue({**rename(inputs, to_template), **binding}, error)
            return rename(replaced, to_ground) if isinstance(replaced, Mapping) else replaced

        def rollback_ground(inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
            rollback({**rename(inputs, to_template), **binding}, rename(outputs, to_template))

        return TaskSpec(
            name=ground_name(self.name, (binding[name] for name, _ in self.params)),
            func=run,
            requires=frozenset(to_ground[p] for p in self.requires),
            provides=frozenset(to_ground[p] for p in self.provides),
            consumes=frozenset(to_ground[p] for p in self.consumes),
            optional=self.optional,
            rescue=None if rescue is None else rescue_ground,
            rollback=None if rollback is None else rollback_ground,
            options=self.options,
        )

    def grounded(self, objects: Mapping[str, tuple[str, ...]]) -> list[TaskSpec]:
        """A plain task itself; a parameterised one for every binding to the objects."""
        if not self.params:
            return [self]
        return [self.ground(binding) for binding in bindings(self.params, objects)]

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
    params: Mapping[str, str] | Iterable[str] = (),
    options: Mapping[str, Any] | None = None,
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
        params=_params(params, name=name),
        options=_options(options, name=name),
    )
    if not spec.provides:
        raise GraphTaskError(ERR_NO_PROVIDES.format(name=name))
    if spec.provides & spec.consumes:
        overlap = _quoted(spec.provides & spec.consumes)
        raise GraphTaskError(ERR_PROVIDES_CONSUMES.format(name=name, props=overlap))
    return spec


def _options(value: Any, *, name: str):
    """The task's own JobOptions (validated as every job's are), or None."""
    if value is None:
        return None
    # Imported here: the registry and the planner stay importable without Django.
    from tasksapp.engine.models import Delivery
    from tasksapp.engine.options import JobOptions, JobOptionsError

    if not isinstance(value, Mapping) or not set(value) <= set(TASK_OPTION_FIELDS):
        given = ", ".join(sorted(map(str, value))) if isinstance(value, Mapping) else value
        allowed = ", ".join(TASK_OPTION_FIELDS)
        raise GraphTaskError(ERR_OPTIONS_KEYS.format(name=name, allowed=allowed, given=given))
    try:
        return JobOptions.validated(
            max_attempts=value.get("max_attempts", 1),
            retry_policy=value.get("retry_policy"),
            time_limit=value.get("time_limit"),
            delivery=Delivery.TRANSACTIONAL,
            **{key: value[key] for key in ("queue", "priority", "concurrency_key") if key in value},
        )
    except JobOptionsError as exc:
        raise GraphTaskError(ERR_OPTIONS.format(name=name, reason=exc)) from exc


def _params(value: Any, *, name: str) -> tuple[tuple[str, str], ...]:
    if isinstance(value, str):
        raise GraphTaskError(ERR_PARAMS.format(name=name))
    pairs = list(value.items()) if isinstance(value, Mapping) else [(p, p) for p in value]
    if not all(isinstance(p, str) and p.isidentifier() for pair in pairs for p in pair):
        raise GraphTaskError(ERR_PARAMS.format(name=name))
    return tuple(pairs)


@dataclass(frozen=True)
class RegistrySnapshot:
    """An immutable copy of a registry; equal and hashed by fingerprint (a cache key)."""

    fingerprint: str
    specs: tuple[TaskSpec, ...] = field(compare=False)


class Registry:
    """Graph tasks by name. Registering the same definition again is a no-op."""

    def __init__(self, specs: Iterable[TaskSpec] = ()) -> None:
        self._specs: dict[str, TaskSpec] = {}
        self._ground: dict[str, TaskSpec] = {}  # ground tasks built for get(), by name
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
        self._ground.clear()
        return spec

    def task(self, **declaration: Any) -> Callable[[TaskFunc], TaskFunc]:
        """Decorator form of :meth:`register`; takes the keyword arguments of task_spec."""

        def decorate(func: TaskFunc) -> TaskFunc:
            func.graph_task = self.register(task_spec(func, **declaration))
            return func

        return decorate

    def get(self, name: str) -> TaskSpec:
        """The task called ``name``, or the ground task ``base(obj, …)`` of a
        parameterised one."""
        spec = self._specs.get(name)
        if spec is not None:
            return spec
        ground = self._ground.get(name)
        if ground is not None:
            return ground
        split = split_ground_name(name)
        base = self._specs.get(split[0]) if split else None
        if base is None or not base.params or len(split[1]) != len(base.params):
            raise GraphTaskError(ERR_UNKNOWN.format(name=name))
        ground = base.ground(dict(zip((p for p, _ in base.params), split[1], strict=True)))
        self._ground[name] = ground
        return ground

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
    params: Mapping[str, str] | Iterable[str] = (),
    options: Mapping[str, Any] | None = None,
) -> Callable[[TaskFunc], TaskFunc]:
    """Register the decorated function as a graph task (in the default registry).
    ``params`` ({name: object type}, or names that are their own types) makes it a
    parameterised task, grounded over the objects each job names (grounding.py).
    ``options`` ({"max_attempts", "retry_policy", "time_limit"}) are the task's own job
    options: its runs are retried by them before the graph's strategy applies."""
    target = default_registry if registry is None else registry
    return target.task(
        requires=requires,
        provides=provides,
        consumes=consumes,
        optional=optional,
        rescue=rescue,
        rollback=rollback,
        name=name,
        params=params,
        options=options,
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
