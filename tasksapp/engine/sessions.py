"""The engine's own database sessions (dispatchers and workers): commits, lifetime, plans.

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

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection, transaction
from django.db.backends.signals import connection_created

from tasksapp.engine.settings import tempo_settings


def use_engine_sessions() -> None:
    """This process is a dispatcher or a worker: its database sessions commit
    asynchronously (if enabled) and live as long as the process (see `_engine_session`)."""
    connection_created.connect(_engine_session, weak=False, dispatch_uid="tempo-engine-session")
    if connection.connection is not None:
        _engine_session(sender=None, connection=connection)


def _engine_session(sender, connection, **kwargs) -> None:
    # No age limit (CONN_MAX_AGE is for the web processes): a new session costs 5-20 ms
    # (connecting, cold caches) on the next job's path, and the threads of workers started
    # together would all reconnect at the same moment: with the 600 s limit, the first
    # burst after it ran 30-70 ms late. A broken session is still replaced
    # (close_old_connections checks for errors).
    connection.close_at = None
    if tempo_settings().async_commit and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO off")


def flush_commits() -> None:
    """Return once every earlier commit of this session is on disk: a synchronous commit
    that writes WAL flushes everything before it."""
    if connection.vendor != "postgresql" or not tempo_settings().async_commit:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO on")
        cursor.execute("SELECT txid_current()")


NEVER_BY_ITSELF = 2**31 - 1  # executions before psycopg would prepare a statement unasked


@contextmanager
def engine_cursor() -> Iterator[Any]:
    """A cursor for the worker's per-job statements (start, finish) that binds parameters
    on the server and prepares the statement once per session.

    Django's PostgreSQL cursors bind parameters client-side, so the server parses and
    plans every statement anew: about 0.5 ms for the start, between a job's run time and
    its handler, paid by every worker at once in a burst. Their generic plan is the one
    wanted at any size (the ids, then the primary key). The dispatcher's claim is not
    prepared: its best plan depends on how many jobs it claims and how many are due.
    `TEMPO_PREPARED_STATEMENTS=false` turns this off (for a connection pooler in
    transaction mode older than PgBouncer 1.21).
    """
    if connection.vendor != "postgresql" or not tempo_settings().prepared_statements:
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns preparing off for the whole session; its own (client-side binding)
        # cursors never prepare anyway, so only `prepare=True` below ever does.
        raw.prepare_threshold = NEVER_BY_ITSELF
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        yield _Prepared(cursor)


class _Prepared:
    def __init__(self, cursor: psycopg.Cursor) -> None:
        self._cursor = cursor

    def execute(self, query: str, params: dict[str, Any]) -> None:
        self._cursor.execute(query, params, prepare=True)

    def fetchall(self) -> list[tuple]:
        return self._cursor.fetchall()

    def fetchone(self) -> tuple | None:
        return self._cursor.fetchone()
