"""Members follow their audience: a set-based reconcile pass per task (`audience_sync`),
run before each planning, on the planner's timer and on demand, and the same pass for the
objects of one save or delete (model signals, after commit).

A pass holds its task's row FOR UPDATE, as planning a slice does: a slice's insert sees
the members that joined, or the pass sees the slice and plans them into it. The audience's
keys never come into Python: its own query fills a temporary table, and every step is one
statement over it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.contenttypes.models import ContentType
from django.db.models import F
from django.utils import timezone

from tasksapp.engine.db import database_vendor, on_postgres, tempo_atomic, tempo_connection
from tasksapp.recurring import phases, sql
from tasksapp.recurring.audiences import AudienceError, audience_queryset, check_same_database
from tasksapp.recurring.models import RecurringTask, SlicePlan

from .errors import PlanningInputError
from .recurring_tasks import ERR_AUDIENCE_DATABASE
from .slices import plan_members

log = logging.getLogger(__name__)

ERR_NO_AUDIENCE = "task {name!r} has no audience: it runs for every active member."
REASON_LEFT = "the member left the audience of task {task} (or its object was deleted)"


@dataclass(frozen=True)
class AudienceSync:
    """What one pass did for one task."""

    joined: int = 0
    left: int = 0
    jobs_planned: int = 0
    jobs_cancelled: int = 0
    jobs_restored: int = 0


def audience_sync(*, task: RecurringTask, now: dt.datetime | None = None) -> AudienceSync:
    """Reconcile the task's members with its audience: objects that entered it join (and
    are planned into the open slices), those that left it or were deleted leave (their
    waiting jobs cancelled). Catches what bypassed the signals (QuerySet.update,
    bulk_create, raw SQL)."""
    if not task.audience:
        raise PlanningInputError(ERR_NO_AUDIENCE.format(name=task.name))
    done = _sync(task, only=None, now=now or timezone.now())
    RecurringTask.objects.filter(pk=task.pk).update(
        audience_synced_at=timezone.now(), audience_joined=done.joined, audience_left=done.left
    )
    return done


def audience_sync_all(*, now: dt.datetime | None = None) -> dict[str, AudienceSync]:
    """The pass for every active task with an audience; a failing task is logged and the
    others go on."""
    done = {}
    for task in RecurringTask.objects.filter(active=True).exclude(audience="").order_by("id"):
        try:
            done[task.name] = audience_sync(task=task, now=now)
        except Exception:  # an audience whose model or function is gone: the others go on
            log.exception("audience sync of task %s failed; the next run tries again", task.name)
    return done


def audience_objects_changed(*, task: RecurringTask, keys: Sequence[object]) -> AudienceSync:
    """The pass for the objects `keys` (primary keys) alone: a save or delete seen by a
    signal. The task's counters since its last full pass grow by what it did."""
    done = _sync(task, only=[str(key) for key in keys], now=timezone.now())
    if done.joined or done.left:
        RecurringTask.objects.filter(pk=task.pk).update(
            audience_joined=F("audience_joined") + done.joined,
            audience_left=F("audience_left") + done.left,
        )
    return done


def _sync(task: RecurringTask, *, only: list[str] | None, now: dt.datetime) -> AudienceSync:
    if not on_postgres():
        raise PlanningInputError(ERR_AUDIENCE_DATABASE.format(vendor=database_vendor()))
    with tempo_atomic():
        task = RecurringTask.objects.select_for_update().get(pk=task.pk)  # as stored now
        try:
            queryset = audience_queryset(task.audience, task.audience_filter)
            check_same_database(queryset)
        except AudienceError as exc:
            raise PlanningInputError(str(exc)) from exc
        if only is not None:
            queryset = queryset.filter(pk__in=only)
        model = queryset.model
        content_type = ContentType.objects.get_for_model(model, for_concrete_model=False)
        [(joined_at,)] = _execute(sql.AUDIENCE_CLOCK, {}, fetch=True)
        params = {
            "task_id": task.pk,
            "ct": content_type.pk,
            "label": model._meta.label_lower,
            "random": task.phase_strategy == phases.RANDOM,
            "shift": task.phase_shift,
            "only": only,
            "now": now,
            "reason": REASON_LEFT.format(task=task.name),
            "joined_at": joined_at,
        }
        _fill_audience(queryset)
        _execute(sql.LOCK_ORDINALS, {"lock_class": sql.ORDINAL_LOCK_CLASS})
        _execute(sql.AUDIENCE_MEMBERS_CREATE, params)
        [(left, cancelled)] = _execute(sql.AUDIENCE_LEAVE, params, fetch=True)
        joined = _execute(sql.AUDIENCE_JOIN, params)
        restored = _execute(sql.AUDIENCE_RESTORE, params) if joined else 0
        planned = _plan_joined(task, joined_at=joined_at, now=now) if joined else 0
        meta, db = model._meta, tempo_connection()
        orphans = sql.AUDIENCE_ORPHANS_DELETE.format(
            table=db.ops.quote_name(meta.db_table),
            pk=db.ops.quote_name(meta.pk.column),
            pk_type=meta.pk.rel_db_type(db),
        )
        _execute(orphans, params)
    return AudienceSync(joined, left, planned, cancelled, restored)


def _fill_audience(queryset) -> None:
    query, query_params = queryset.order_by().values_list("pk").query.sql_with_params()
    with tempo_connection().cursor() as cursor:
        cursor.execute(sql.AUDIENCE_TEMP_CREATE)
        cursor.execute(sql.AUDIENCE_TEMP_CLEAR)
        cursor.execute(sql.AUDIENCE_TEMP_FILL.format(query=query), query_params)


def _plan_joined(task: RecurringTask, *, joined_at: dt.datetime, now: dt.datetime) -> int:
    """The members that joined in this pass, into the task's open slices."""
    plans = SlicePlan.objects.filter(task=task, ends_at__gt=now).order_by("period", "slice_index")
    planned = 0
    for plan in plans:
        plan.task = task
        planned += plan_members(plan, not_before=now, joined_at=joined_at)[0]
    return planned


def _execute(statement: str, params: dict, *, fetch: bool = False):
    with tempo_connection().cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if fetch else cursor.rowcount
