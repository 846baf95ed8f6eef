"""The engine's bulk reads and writes of jobs, behind one interface (`JobStore`): on
PostgreSQL its named statements with the database clock (`PostgresJobStore`), on any
other database the same guards through the ORM (`SqliteJobStore`). The backend is
chosen once per database kind (`on_postgres`); nothing else branches on it for these."""

from __future__ import annotations

from functools import cache

from tasksapp.engine.db import on_postgres

from .base import JobStore
from .postgres import PostgresJobStore
from .sqlite import SqliteJobStore


@cache
def store_for(postgres: bool) -> JobStore:
    """The job store of PostgreSQL or of SQLite (one per process)."""
    return PostgresJobStore() if postgres else SqliteJobStore()


def job_store() -> JobStore:
    """The job store of Tempo's database."""
    return store_for(on_postgres())


__all__ = ["JobStore", "PostgresJobStore", "SqliteJobStore", "job_store", "store_for"]
