"""The engine's bulk reads and writes of jobs, behind one interface (`JobStore`): on
PostgreSQL its named statements with the database clock (`PostgresJobStore`), on any
other database the same guards through the ORM (`SqliteJobStore`). The backend is
chosen once per database vendor; nothing else branches on the vendor for these."""

from __future__ import annotations

from functools import cache

from tasksapp.engine.db import tempo_connection

from .base import JobStore
from .postgres import PostgresJobStore
from .sqlite import SqliteJobStore


@cache
def store_for(vendor: str) -> JobStore:
    """The job store of a database of this vendor (one per process)."""
    return PostgresJobStore() if vendor == "postgresql" else SqliteJobStore()


def job_store() -> JobStore:
    """The job store of Tempo's database."""
    return store_for(tempo_connection().vendor)


__all__ = ["JobStore", "PostgresJobStore", "SqliteJobStore", "job_store", "store_for"]
