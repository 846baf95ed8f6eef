"""The subcommands of `manage.py tempo`, each one function registered with
`@subcommand(...)` in a module of this package (jobs.py, queues.py); every module here is
imported when the command starts. A new subcommand is one such function, e.g. in
health.py:

    @subcommand("health", help="Say whether every part is up", arguments=_arguments)
    def health(command, options) -> int | None:
        command.stdout.write("ok")

`command` is the running BaseCommand (its stdout, stderr, style), `options` the parsed
arguments; an int returned is the exit status. Bad input raises CommandError.
"""

from __future__ import annotations

import getpass
import importlib
import pkgutil
from argparse import ArgumentParser
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Run = Callable[[Any, dict[str, Any]], int | None]


@dataclass(frozen=True)
class Subcommand:
    path: tuple[str, ...]  # ("jobs", "list"): `manage.py tempo jobs list`
    help: str
    run: Run
    arguments: Callable[[ArgumentParser], None] | None = None


SUBCOMMANDS: dict[tuple[str, ...], Subcommand] = {}
# What each group of subcommands is about (a group without an entry has its name).
GROUPS = {
    "jobs": "List, show, retry, cancel or run now jobs (by the same filters as the API's"
    " bulk action)",
    "queues": "Pause or resume a queue",
}


def subcommand(
    *path: str, help: str, arguments: Callable[[ArgumentParser], None] | None = None
) -> Callable[[Run], Run]:
    """Register the decorated function as `manage.py tempo <path...>`."""

    def register(run: Run) -> Run:
        SUBCOMMANDS[path] = Subcommand(path, help, run, arguments)
        return run

    return register


def discovered() -> dict[tuple[str, ...], Subcommand]:
    """Every subcommand of this package's modules."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return SUBCOMMANDS


def add_subcommands(parser: ArgumentParser) -> None:
    """A parser for each subcommand, nested by its path; the chosen one's Subcommand is
    the parsed options' `subcommand`."""
    top = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    groups: dict[tuple[str, ...], Any] = {(): top}
    for path, sub in sorted(discovered().items()):
        for depth in range(1, len(path)):
            if path[:depth] not in groups:
                name = path[depth - 1]
                about = GROUPS.get(name, name)
                group = groups[path[: depth - 1]].add_parser(name, help=about, description=about)
                groups[path[:depth]] = group.add_subparsers(
                    dest=f"command_{depth}", required=True, metavar="COMMAND"
                )
        leaf = groups[path[:-1]].add_parser(path[-1], help=sub.help, description=sub.help)
        if sub.arguments is not None:
            sub.arguments(leaf)
        leaf.set_defaults(subcommand=sub)


def who() -> str:
    """The name the audit log records for an action taken from manage.py."""
    try:
        return f"manage.py ({getpass.getuser()})"
    except (KeyError, OSError):
        return "manage.py"
