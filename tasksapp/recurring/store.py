"""What recurring work asks of the database besides its models: the locks that keep
members and slice plans consistent, and the grouped reads of a task's plan page. On
PostgreSQL these are the named statements of `recurring/sql.py`; elsewhere (the
embedded SQLite mode, which serialises writers by itself) the locks are not needed and
the reads group in Python. The backend is chosen once per database vendor.

Jobs themselves are inserted through the engine's job store (`insert_jobs`).
"""

from __future__ import annotations

import datetime as dt
from functools import cache
from typing import Protocol

from django.db import connection

from tasksapp.engine.models import Job
from tasksapp.recurring import sql
from tasksapp.recurring.models import Member
from tasksapp.recurring.schedule import slice_of


class RecurringStore(Protocol):
    def lock_ordinals(self) -> None:
        """Serialise ordinal allocation until the transaction ends."""

    def lock_active_tasks_shared(self) -> None:
        """Hold the active tasks (shared) while a member reads planned slices: a slice's
        insert (FOR UPDATE on its task) then either sees the member or is seen by it."""

    def members_per_slice(self, slices: int) -> dict[int, int]:
        """Active members per slice index, for a grid of `slices` slices."""

    def job_load(
        self, *, handler: str, start: dt.datetime, width: dt.timedelta, buckets: int
    ) -> dict[int, int]:
        """Jobs of `handler` due in each of `buckets` parts of `width` from `start`."""


class PostgresRecurringStore:
    def lock_ordinals(self) -> None:
        _execute(sql.LOCK_ORDINALS, {"lock_class": sql.ORDINAL_LOCK_CLASS})

    def lock_active_tasks_shared(self) -> None:
        _execute(sql.LOCK_TASKS_SHARED, {})

    def members_per_slice(self, slices: int) -> dict[int, int]:
        return dict(_execute(sql.MEMBERS_PER_SLICE, {"slices": slices}))

    def job_load(
        self, *, handler: str, start: dt.datetime, width: dt.timedelta, buckets: int
    ) -> dict[int, int]:
        params = {
            "handler": handler,
            "start": start,
            "end": start + width * buckets,
            "width": width.total_seconds(),
            "buckets": buckets,
        }
        return dict(_execute(sql.JOB_LOAD, params))


class SqliteRecurringStore:
    def lock_ordinals(self) -> None:
        pass  # SQLite serialises writers by itself

    def lock_active_tasks_shared(self) -> None:
        pass

    def members_per_slice(self, slices: int) -> dict[int, int]:
        counts: dict[int, int] = {}
        for phase in Member.objects.filter(active=True).values_list("phase", flat=True):
            index = slice_of(phase, slices)
            counts[index] = counts.get(index, 0) + 1
        return counts

    def job_load(
        self, *, handler: str, start: dt.datetime, width: dt.timedelta, buckets: int
    ) -> dict[int, int]:
        jobs = Job.objects.filter(
            handler=handler, run_at__gte=start, run_at__lt=start + width * buckets
        )
        counts: dict[int, int] = {}
        for run_at in jobs.values_list("run_at", flat=True):
            index = min(int((run_at - start) / width), buckets - 1)
            counts[index] = counts.get(index, 0) + 1
        return counts


def _execute(statement: str, params: dict) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


@cache
def _store_for(vendor: str) -> RecurringStore:
    return PostgresRecurringStore() if vendor == "postgresql" else SqliteRecurringStore()


def recurring_store() -> RecurringStore:
    """The recurring store of the default database."""
    return _store_for(connection.vendor)
