"""Parameterised graph tasks, grounded over a job's objects (pure: no database).

A task may declare typed parameters, and its propositions use them as arguments:

    @graph_task(params={"network": "network"}, requires=["token(network)"],
                provides=["posts(network)"])
    def fetch_posts(inputs): ...   # inputs: {"token(network)": …, "network": "google"}

A job names the objects of each type in its ``has`` — ``{"network": ["facebook",
"google"]}`` — and the planner plans with one ground task per binding of the parameters
to those objects: ``fetch_posts(facebook)`` requires ``token(facebook)`` and provides
``posts(facebook)``. The ground task calls the same function with its inputs named as
declared (``token(network)``) plus each parameter's object, and maps its outputs back to
the ground propositions; its rescue and rollback hooks are mapped the same way.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import Any

ATOM = re.compile(r"^([^()\s,]+)\(([^()\s]*)\)$")
OBJECT = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
MAX_GROUND_TASKS = 20_000  # per plan: the product of the objects over a task's parameters

ERR_OBJECTS = (
    "has[{type!r}] must be a list of object names (letters, digits, '_', '.', ':', '-')"
    " for the parameters of type {type!r}."
)
ERR_TOO_MANY = (
    "grounding the parameterised tasks over the job's objects makes more than {most} tasks."
)


class GroundingError(ValueError):
    pass


def atom(prop: str) -> tuple[str, tuple[str, ...]]:
    """``"posts(network)"`` → ``("posts", ("network",))``; a plain name has no arguments."""
    match = ATOM.match(prop)
    if match is None:
        return prop, ()
    args = match.group(2)
    return match.group(1), tuple(args.split(",")) if args else ()


def bound(prop: str, binding: Mapping[str, str]) -> str:
    """The proposition with each parameter among its arguments replaced by its object."""
    name, args = atom(prop)
    if not args:
        return prop
    return f"{name}({','.join(binding.get(arg, arg) for arg in args)})"


def ground_name(task: str, objects: Iterable[str]) -> str:
    return f"{task}({','.join(objects)})"


def split_ground_name(name: str) -> tuple[str, tuple[str, ...]] | None:
    """``"fetch_posts(google)"`` → ``("fetch_posts", ("google",))``; None if not one."""
    if not name.endswith(")") or "(" not in name:
        return None
    base, _, args = name[:-1].partition("(")
    return base, tuple(args.split(",")) if args else ()


def objects_by_type(has: Any, types: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The objects the job names for each parameter type (``has[type]``: a list of
    names); GroundingError for a list that is not one."""
    if not isinstance(has, Mapping):
        return {}
    found = {}
    for kind in sorted(set(types)):
        if kind not in has:
            continue
        names = has[kind]
        valid = isinstance(names, list | tuple) and all(
            isinstance(n, str) and OBJECT.match(n) for n in names
        )
        if not valid:
            raise GroundingError(ERR_OBJECTS.format(type=kind))
        found[kind] = tuple(sorted(set(names)))
    return found


def bindings(params: tuple[tuple[str, str], ...], objects: Mapping[str, tuple[str, ...]]):
    """Every binding of the parameters to objects of their types, in name order."""
    choices = [objects.get(kind, ()) for _, kind in params]
    for combination in itertools.product(*choices):
        yield dict(zip((name for name, _ in params), combination, strict=True))


def rename(values: Mapping[str, Any] | None, names: Mapping[str, str]) -> dict[str, Any] | None:
    """``values`` with each key found in ``names`` renamed (others kept)."""
    if values is None:
        return None
    return {names.get(key, key): value for key, value in values.items()}
