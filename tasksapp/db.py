"""Commit durability for the engine's own processes (dispatchers and workers).

A synchronous commit waits for the WAL flush (about 4 ms on the development disk); every
claim, start and finish would pay it. The engine's transitions are safe to commit
asynchronously: if PostgreSQL crashes, it loses at most the last fraction of a second of
commits, which only moves jobs back to an earlier state (claimed → scheduled, running →
claimed) from which the fenced transitions and leases redo them — a transactional
handler's effects commit in the same transaction as its success and are lost, and redone,
together. One transition must be durable before anything outside the database happens:
the start of an at-most-once job (`flush_commits`). Scheduling through the API keeps the
server's default (synchronous) commit.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection, transaction
from django.db.backends.signals import connection_created


def use_async_commit() -> None:
    """Make this process's database sessions commit asynchronously (if enabled)."""
    if not settings.TEMPO["ASYNC_COMMIT"]:
        return
    connection_created.connect(_async_commit, weak=False, dispatch_uid="tempo-async-commit")
    if connection.connection is not None:
        _async_commit(sender=None, connection=connection)


def _async_commit(sender, connection, **kwargs) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO off")


def flush_commits() -> None:
    """Return once every earlier commit of this session is on disk: a synchronous commit
    that writes WAL flushes everything before it."""
    if connection.vendor != "postgresql" or not settings.TEMPO["ASYNC_COMMIT"]:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO on")
        cursor.execute("SELECT txid_current()")
