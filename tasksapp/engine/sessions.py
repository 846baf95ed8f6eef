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

from django.db.backends.signals import connection_created

from tasksapp.engine.db import on_postgres, tempo_alias, tempo_connection
from tasksapp.engine.store import job_store, store_for


def use_engine_sessions() -> None:
    """This process is a dispatcher or a worker: its database sessions commit
    asynchronously (if enabled) and live as long as the process (see `_engine_session`)."""
    connection_created.connect(_engine_session, weak=False, dispatch_uid="tempo-engine-session")
    db = tempo_connection()
    if db.connection is not None:
        _engine_session(sender=None, connection=db)


def _engine_session(sender, connection, **kwargs) -> None:
    # No age limit (CONN_MAX_AGE is for the web processes): a new session costs 5-20 ms
    # (connecting, cold caches) on the next job's path, and the threads of workers started
    # together would all reconnect at the same moment: with the 600 s limit, the first
    # burst after it ran 30-70 ms late. A broken session is still replaced
    # (close_old_connections checks for errors).
    connection.close_at = None
    if connection.alias == tempo_alias():
        # Only Tempo's own sessions commit asynchronously: a handler's writes on another
        # database are not redone by leases and fences if a crash lost them.
        store_for(on_postgres(connection.alias)).configure_session(connection)


def flush_commits() -> None:
    """Return once every earlier commit of this session is on disk (before an
    at-most-once job's handler runs)."""
    job_store().flush_commits()
