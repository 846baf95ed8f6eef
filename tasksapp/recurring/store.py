"""What recurring work asks of the database besides its models: the locks that keep
members and slice plans consistent, and the grouped reads of a task's plan page. On
PostgreSQL these are the named statements of `recurring/sql.py`; elsewhere (the
embedded SQLite mode, which serialises writers by itself) the locks are not needed and
the reads group in Python. The backend is chosen once per database kind.

Jobs themselves are inserted through the engine's job store (`insert_jobs`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from django.db.models import DateTimeField, ExpressionWrapper, F
from django.db.models.functions import Greatest

from tasksapp.engine.db import on_postgres, tempo_connection
from tasksapp.engine.models import Job, JobState
from tasksapp.engine.models.jobs import DUE_STATES
from tasksapp.recurring import sql
from tasksapp.recurring.models import AudienceMember, FreeOrdinal, Member, SlicePlan
from tasksapp.recurring.schedule import slice_of


class RecurringStore(Protocol):
    def lock_ordinals(self) -> None:
        """Serialise ordinal allocation until the transaction ends."""

    def lock_active_tasks_shared(self) -> None:
        """Hold the active tasks (shared) while a member reads planned slices: a slice's
        insert (FOR UPDATE on its task) then either sees the member or is seen by it."""

    def members_per_slice(self, slices: int, *, task_id: int | None = None) -> dict[int, int]:
        """Active members per slice index, for a grid of `slices` slices (of the audience
        task `task_id`'s own members and phases, if given)."""

    def job_load(
        self, *, handler: str, start: dt.datetime, width: dt.timedelta, buckets: int
    ) -> dict[int, int]:
        """Jobs of `handler` due in each of `buckets` parts of `width` from `start`."""

    def members_delete(self, *, ids: Sequence[int], now: dt.datetime) -> tuple[int, int]:
        """Delete members `ids`, free their ordinals and cancel their waiting jobs:
        (members deleted, jobs cancelled)."""

    def members_deactivate(self, *, ids: Sequence[int], now: dt.datetime) -> tuple[int, int]:
        """Deactivate the active members of `ids` and cancel their waiting jobs:
        (members deactivated, jobs cancelled)."""

    def members_activate(self, *, ids: Sequence[int], now: dt.datetime) -> Activation:
        """Activate the inactive members of `ids` and schedule again their cancelled jobs
        still ahead in the open slices; name the jobs still ahead that are missing."""


class PostgresRecurringStore:
    def lock_ordinals(self) -> None:
        _execute(sql.LOCK_ORDINALS, {"lock_class": sql.ORDINAL_LOCK_CLASS})

    def lock_active_tasks_shared(self) -> None:
        _execute(sql.LOCK_TASKS_SHARED, {})

    def members_per_slice(self, slices: int, *, task_id: int | None = None) -> dict[int, int]:
        if task_id is not None:
            params = {"slices": slices, "task_id": task_id}
            return dict(_execute(sql.AUDIENCE_MEMBERS_PER_SLICE, params))
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

    def members_delete(self, *, ids: Sequence[int], now: dt.datetime) -> tuple[int, int]:
        [(members, jobs)] = _execute(sql.DELETE_MEMBERS, {"ids": list(ids), "now": now})
        return members, jobs

    def members_deactivate(self, *, ids: Sequence[int], now: dt.datetime) -> tuple[int, int]:
        [(members, jobs)] = _execute(sql.DEACTIVATE_MEMBERS, {"ids": list(ids), "now": now})
        return members, jobs

    def members_activate(self, *, ids: Sequence[int], now: dt.datetime) -> Activation:
        [row] = _execute(sql.ACTIVATE_MEMBERS, {"ids": list(ids), "now": now})
        members, restored, plan_ids, member_ids = row
        return Activation(members, restored, list(zip(plan_ids, member_ids, strict=True)))


class SqliteRecurringStore:
    def lock_ordinals(self) -> None:
        pass  # SQLite serialises writers by itself

    def lock_active_tasks_shared(self) -> None:
        pass

    def members_per_slice(self, slices: int, *, task_id: int | None = None) -> dict[int, int]:
        counts: dict[int, int] = {}
        if task_id is not None:
            rows = AudienceMember.objects.filter(task_id=task_id, active=True)
        else:
            rows = Member.objects.filter(active=True, content_type__isnull=True)
        for phase in rows.values_list("phase", flat=True):
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

    def members_delete(self, *, ids: Sequence[int], now: dt.datetime) -> tuple[int, int]:
        gone = list(Member.objects.filter(id__in=ids).values_list("id", "ordinal"))
        jobs = _cancel_waiting(_phases([m for m, _ in gone]), now)
        Member.objects.filter(id__in=[m for m, _ in gone]).delete()  # and their rows in tasks
        freed = [FreeOrdinal(ordinal=ordinal) for _, ordinal in gone]
        FreeOrdinal.objects.bulk_create(freed, ignore_conflicts=True)
        return len(gone), jobs

    def members_deactivate(self, *, ids: Sequence[int], now: dt.datetime) -> tuple[int, int]:
        changed = list(Member.objects.filter(id__in=ids, active=True).values_list("id", flat=True))
        Member.objects.filter(id__in=changed).update(active=False)
        AudienceMember.objects.filter(member_id__in=changed).update(active=False)
        return len(changed), _cancel_waiting(_phases(changed), now)

    def members_activate(self, *, ids: Sequence[int], now: dt.datetime) -> Activation:
        changed = list(Member.objects.filter(id__in=ids, active=False).values_list("id", flat=True))
        Member.objects.filter(id__in=changed).update(active=True)
        AudienceMember.objects.filter(member_id__in=changed).update(active=True)
        open_plans = SlicePlan.objects.filter(task__active=True, ends_at__gt=now)
        keys = _job_keys(_phases(changed), open_plans)
        restored, taken = 0, set()
        for chunk in _chunks(keys, SQLITE_KEYS):
            by_key = {key: plan for key, plan, _ in chunk}
            taken.update(
                Job.objects.filter(idempotency_key__in=by_key).values_list(
                    "idempotency_key", flat=True
                )
            )
            restored += Job.objects.filter(
                idempotency_key__in=by_key, state=JobState.CANCELLED, run_at__gte=now
            ).update(
                state=JobState.SCHEDULED,
                finished_at=None,
                claimed_by="",
                lease_expires_at=None,
                cancel_requested_at=None,
                max_attempts=Greatest("max_attempts", F("attempts") + 1),
            )
        missing = [
            (plan.id, int(key.rsplit(":", 1)[1]))
            for key, plan, phase in keys
            if key not in taken and plan.occurrence(phase) >= now
        ]
        return Activation(len(changed), restored, missing)


@dataclass(frozen=True)
class Activation:
    """Members activated, their jobs scheduled again, and the (slice plan id, member id)
    of each job still ahead that is missing (its slice was planned while they were away)."""

    members: int
    restored: int
    missing: list[tuple[int, int]]


SQLITE_KEYS = 500  # job keys per statement, well within SQLite's bound on parameters


def _cancel_waiting(members: list[Phase], now: dt.datetime) -> int:
    """The SQLite form of sql.DELETE_MEMBERS' cancellation (job_cancel_waiting's, set-based)."""
    until = ExpressionWrapper(F("ends_at") + F("period_length"), output_field=DateTimeField())
    pending = SlicePlan.objects.alias(until=until).filter(until__gt=now)
    cancelled = 0
    for chunk in _chunks(_job_keys(members, pending), SQLITE_KEYS):
        keys = [key for key, _, _ in chunk]
        cancelled += Job.objects.filter(idempotency_key__in=keys, state__in=DUE_STATES).update(
            state=JobState.CANCELLED, finished_at=now, lease_expires_at=None
        )
    return cancelled


# A member's phase in the tasks of one `phase_task` (sql._MEMBER_JOB_KEYS): 0, its own,
# for the tasks without audience; an audience task's id, its phase in that task.
Phase = tuple[int, float, int]  # member id, phase, phase_task


def _phases(member_ids: list[int]) -> list[Phase]:
    """The members' phases as sql._PHASES reads them: their own for members created by
    external_id, and their phase in each audience task they belong to."""
    own = Member.objects.filter(id__in=member_ids, content_type__isnull=True)
    rows = AudienceMember.objects.filter(member_id__in=member_ids)
    return [
        *((m, phase, 0) for m, phase in own.values_list("id", "phase")),
        *rows.values_list("member_id", "phase", "task_id"),
    ]


def _job_keys(members: list[Phase], plans) -> list[tuple[str, SlicePlan, float]]:
    """The planned jobs' keys of `members` in `plans` (read once), with the plan and the
    phase: each member looked up by its slice in each grid of the tasks that plan its
    phase, as sql._MEMBER_JOB_KEYS does. A key is job_key_prefix(task, period) + the
    member's id."""
    grids: dict[tuple[int, int], dict[int, list[SlicePlan]]] = {}
    fields = ("task_id", "period", "slice_index", "slices", "period_start", "period_length")
    for plan in plans.select_related("task").only(*fields, "task__timezone", "task__audience"):
        phase_task = plan.task_id if plan.task.audience else 0
        grid = grids.setdefault((phase_task, plan.slices), {})
        grid.setdefault(plan.slice_index, []).append(plan)
    return [
        (f"plan:{plan.task_id}:{plan.period}:{member_id}", plan, phase)
        for member_id, phase, phase_task in members
        for (task, slices), plans_at in grids.items()
        if task == phase_task
        for plan in plans_at.get(slice_of(phase, slices), ())
    ]


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _execute(statement: str, params: dict) -> list[tuple]:
    with tempo_connection().cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


@cache
def _store_for(postgres: bool) -> RecurringStore:
    return PostgresRecurringStore() if postgres else SqliteRecurringStore()


def recurring_store() -> RecurringStore:
    """The recurring store of Tempo's database."""
    return _store_for(on_postgres())
