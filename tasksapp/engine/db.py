"""The database Tempo's tables live on: the alias named by `TEMPO_DATABASE` ("default"
unless the project puts them on a database of their own, with `tasksapp.routers.TempoRouter`;
docs/DEPLOYMENT.md). Every raw statement, transaction and commit hook of Tempo's goes
through here; ORM queries of Tempo's models reach the same alias through the router.

The one place that asks which database vendor is underneath (`on_postgres`): features
built on PostgreSQL alone (the cluster, audiences, the stores' statements) ask it here."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, connections, transaction

JOB_TABLE = "tasksapp_job"
POSTGRESQL = "postgresql"

_alias: list[str] = []  # read once per process (again when a test overrides the setting)


def tempo_alias() -> str:
    """The alias of Tempo's database."""
    if not _alias:
        _alias.append(getattr(settings, "TEMPO_DATABASE", DEFAULT_DB_ALIAS))
    return _alias[0]


def _forget_alias(setting: str, **kwargs) -> None:
    if setting == "TEMPO_DATABASE":
        _alias.clear()


setting_changed.connect(_forget_alias, dispatch_uid="tempo-database-alias")


def tempo_is_separate() -> bool:
    """Whether Tempo's tables are on another database than the project's default one."""
    return tempo_alias() != DEFAULT_DB_ALIAS


def tempo_connection() -> Any:
    """This thread's connection to Tempo's database."""
    return connections[tempo_alias()]


def on_postgres(alias: str | None = None) -> bool:
    """Whether Tempo's database (or the database `alias`) is PostgreSQL; otherwise it is
    the embedded SQLite of a single instance."""
    connection = connections[alias] if alias else tempo_connection()
    return connection.vendor == POSTGRESQL


def database_vendor() -> str:
    """The vendor of Tempo's database, for messages ("postgresql", "sqlite")."""
    return tempo_connection().vendor


def tempo_atomic(func: Callable | None = None, *, savepoint: bool = True, durable: bool = False):
    """`transaction.atomic` on Tempo's database; as a decorator too. The alias is read
    when the block is entered, not when a function is decorated."""
    if callable(func):

        @functools.wraps(func)
        def inner(*args, **kwargs):
            with transaction.atomic(using=tempo_alias(), savepoint=savepoint, durable=durable):
                return func(*args, **kwargs)

        return inner
    return transaction.atomic(using=tempo_alias(), savepoint=savepoint, durable=durable)


def tempo_on_commit(callback: Callable[[], Any], *, robust: bool = False) -> None:
    """Run `callback` once the current transaction on Tempo's database commits."""
    transaction.on_commit(callback, using=tempo_alias(), robust=robust)


@contextmanager
def atomic_on(*aliases: str) -> Iterator[None]:
    """One transaction on each of these databases (each named once), the first outermost:
    the last commits first. On one database this is one plain `atomic` block."""
    with ExitStack() as stack:
        for alias in dict.fromkeys(aliases):
            stack.enter_context(transaction.atomic(using=alias))
        yield
