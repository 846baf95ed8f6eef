"""PostgreSQL's side of the engine's sessions: asynchronous commits, their flush, and
prepared statements for the worker's per-job statements (see tasksapp.engine.sessions
for why the engine's transitions may commit asynchronously)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from tasksapp.engine.db import tempo_atomic, tempo_connection
from tasksapp.engine.settings import tempo_settings


def configure_session(conn: Any) -> None:
    """An engine session commits asynchronously (if enabled). Behind a transaction pooler
    a session setting would outlive the transaction on a server connection that other
    clients share (the web's writes among them): the pooler's own per-database
    `connect_query` sets it there instead (docs/DEPLOYMENT.md)."""
    settings = tempo_settings()
    if settings.async_commit and not settings.db_pooler:
        with conn.cursor() as cursor:
            cursor.execute("SET synchronous_commit TO off")


def flush_commits() -> None:
    """Return once every earlier commit of this session is on disk: a synchronous commit
    that writes WAL flushes everything before it."""
    if not tempo_settings().async_commit:
        return
    with tempo_atomic(), tempo_connection().cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO on")
        cursor.execute("SELECT txid_current()")


def transaction_aborted(db: Any) -> bool:
    """Whether the session's transaction failed (an error no savepoint took back)."""
    raw = db.connection
    return raw is not None and raw.info.transaction_status == psycopg.pq.TransactionStatus.INERROR


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
    `tuning.PREPARED_STATEMENTS = False` turns this off (for a connection pooler in
    transaction mode older than PgBouncer 1.21).
    """
    db = tempo_connection()
    if not tempo_settings().prepared_statements:
        with db.cursor() as cursor:
            yield cursor
        return
    db.ensure_connection()
    raw = db.connection
    if raw.prepare_threshold is None:
        # Django turns preparing off for the whole session; its own (client-side binding)
        # cursors never prepare anyway, so only `prepare=True` below ever does.
        raw.prepare_threshold = NEVER_BY_ITSELF
    with db.wrap_database_errors, psycopg.Cursor(raw) as cursor:
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
