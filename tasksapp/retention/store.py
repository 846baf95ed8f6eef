"""Retention's storage, one interface with two backends as the job store's: on
PostgreSQL the named statements of `sql.py`, on SQLite (the embedded mode) the same rules
through the ORM. Chosen once per database kind."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from django.db.models import Exists, F, OuterRef, Q

from tasksapp.engine.db import on_postgres, tempo_atomic, tempo_connection
from tasksapp.engine.models import FINAL_STATES, Job
from tasksapp.graphs.models import GraphRun, TaskRun
from tasksapp.recurring.models import SlicePlan
from tasksapp.retention import sql
from tasksapp.retention.models import LAG_BOUNDS_MS, LAG_FIELDS, JobRollup

SUMS = ("jobs", "attempts", "failures", "retried", "lag_count", "lag_sum_ms")


@dataclass(frozen=True)
class RollupRow:
    """Jobs of one handler, recurring task and state that finished in one bucket."""

    bucket: dt.datetime
    handler: str
    task_id: int
    state: str
    jobs: int
    attempts: int
    failures: int
    retried: int
    lag_count: int
    lag_sum_ms: float
    lags: tuple[int, ...]  # per bucket of LAG_BOUNDS_MS, and the rest last


@dataclass(frozen=True, order=True)
class FinishedGroup:
    """Finished jobs of one handler, recurring task and state: the unit retention's ages
    are given for, and one range of its index."""

    handler: str
    task: str  # the payload's recurring_task_id as text; "" for none
    state: str


@dataclass(frozen=True)
class FinishedRule:
    """One group's jobs that finished before `before` may go."""

    group: FinishedGroup
    before: dt.datetime


@dataclass(frozen=True)
class TableSize:
    table: str
    table_bytes: int
    index_bytes: int
    rows: int  # the planner's estimate
    dead_rows: int | None
    last_autovacuum: dt.datetime | None


@dataclass(frozen=True)
class IndexStats:
    """One B-tree index of the jobs table, as `index_bloat` reads it."""

    name: str
    size_bytes: int
    entries: float  # the catalog's count (-1: never counted)
    width: float | None  # average width of its columns; None: no statistics yet


class RetentionStore(Protocol):
    def aggregate(self, *, span: int, since: dt.datetime, until: dt.datetime) -> list[RollupRow]:
        """Jobs finished in [since, until), as rollup rows of `span` seconds."""
        ...

    def roll_up(self, *, span: int, since: dt.datetime, until: dt.datetime) -> None:
        """Add the jobs finished in [since, until) to the stored rollups of `span`."""
        ...

    def finished_groups(self) -> list[FinishedGroup]:
        """The groups that have finished jobs (of the final states)."""
        ...

    def delete_finished(self, rule: FinishedRule, *, now: dt.datetime, batch: int) -> int:
        """Remove one batch of the finished jobs `rule` allows; how many went."""
        ...

    def count_finished(self, rule: FinishedRule) -> int:
        """How many jobs of the rule's group finished before its `before`."""
        ...

    def table_sizes(self, tables: Sequence[str]) -> list[TableSize]: ...

    def job_indexes(self) -> list[IndexStats]:
        """The jobs table's B-tree indexes (none where indexes are not rebuilt)."""
        ...

    def rebuilding(self) -> bool:
        """Whether a rebuild of a jobs table index is running now."""
        ...

    def drop_failed_rebuilds(self) -> list[str]:
        """Drop what interrupted rebuilds left; their names."""
        ...

    def reindex(self, name: str) -> None:
        """Rebuild one index of the jobs table without blocking writes."""
        ...


def bucket_start(moment: dt.datetime, span: int) -> dt.datetime:
    seconds = math.floor(moment.timestamp() / span) * span
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


class PostgresRetentionStore:
    def aggregate(self, *, span: int, since: dt.datetime, until: dt.datetime) -> list[RollupRow]:
        with tempo_connection().cursor() as cursor:
            cursor.execute(sql.AGGREGATE_FINISHED, {"span": span, "since": since, "until": until})
            return [
                RollupRow(*row[:4], *(int(v) for v in row[4:9]), float(row[9]), tuple(row[10:]))
                for row in cursor.fetchall()
            ]

    def roll_up(self, *, span: int, since: dt.datetime, until: dt.datetime) -> None:
        with tempo_connection().cursor() as cursor:
            cursor.execute(sql.ROLL_UP, {"span": span, "since": since, "until": until})

    def finished_groups(self) -> list[FinishedGroup]:
        with tempo_connection().cursor() as cursor:
            cursor.execute(sql.FINISHED_GROUPS)
            return [FinishedGroup(*row) for row in cursor.fetchall()]

    def delete_finished(self, rule: FinishedRule, *, now: dt.datetime, batch: int) -> int:
        group = rule.group
        params = {
            "handler": group.handler,
            "task": group.task,
            "state": group.state,
            "before": rule.before,
            "now": now,
            "batch": batch,
        }
        with tempo_connection().cursor() as cursor:
            cursor.execute(sql.DELETE_FINISHED, params)
            return cursor.rowcount

    def count_finished(self, rule: FinishedRule) -> int:
        group = rule.group
        params = {"handler": group.handler, "task": group.task, "state": group.state}
        with tempo_connection().cursor() as cursor:
            cursor.execute(sql.COUNT_FINISHED, {**params, "before": rule.before})
            return cursor.fetchone()[0]

    def table_sizes(self, tables: Sequence[str]) -> list[TableSize]:
        with tempo_connection().cursor() as cursor:
            cursor.execute(sql.TABLE_SIZES, {"tables": list(tables)})
            return [TableSize(*row) for row in cursor.fetchall()]

    def job_indexes(self) -> list[IndexStats]:
        with tempo_connection().cursor() as cursor:
            cursor.execute(sql.JOB_INDEXES)
            return [
                IndexStats(name, size, float(entries), None if width is None else float(width))
                for name, size, entries, width in cursor.fetchall()
            ]

    def rebuilding(self) -> bool:
        with tempo_connection().cursor() as cursor:
            cursor.execute(sql.REBUILDING)
            return bool(cursor.fetchone()[0])

    def drop_failed_rebuilds(self) -> list[str]:
        with tempo_connection().cursor() as cursor:
            cursor.execute(sql.FAILED_REBUILDS)
            names = [name for (name,) in cursor.fetchall()]
            for name in names:
                cursor.execute(
                    f"DROP INDEX CONCURRENTLY IF EXISTS {tempo_connection().ops.quote_name(name)}"
                )
            return names

    def reindex(self, name: str) -> None:
        with tempo_connection().cursor() as cursor:
            cursor.execute(f"REINDEX INDEX CONCURRENTLY {tempo_connection().ops.quote_name(name)}")


class SqliteRetentionStore:
    """The same rules through the ORM; rollups summed in Python."""

    def aggregate(self, *, span: int, since: dt.datetime, until: dt.datetime) -> list[RollupRow]:
        finished = Job.objects.filter(
            finished_at__gte=since, finished_at__lt=until, state__in=sql.ROLLED_STATES
        ).values_list(
            "finished_at",
            "handler",
            "payload",
            "state",
            "attempts",
            "errors",
            "started_at",
            "run_at",
        )
        groups: dict[tuple, list] = {}
        for finished_at, handler, payload, state, attempts, errors, started, run_at in finished:
            key = (bucket_start(finished_at, span), handler, _task_id(payload), state)
            sums = groups.setdefault(key, [0, 0, 0, 0, 0, 0.0, [0] * len(LAG_FIELDS)])
            sums[0] += 1
            sums[1] += attempts
            sums[2] += len(errors) if isinstance(errors, list) else 0
            sums[3] += attempts > 1
            if state in ("succeeded", "dead") and started is not None:
                lag_ms = (started - run_at).total_seconds() * 1000
                sums[4] += 1
                sums[5] += lag_ms
                sums[6][lag_bucket(lag_ms)] += 1
        return [RollupRow(*key, *sums[:6], tuple(sums[6])) for key, sums in groups.items()]

    def roll_up(self, *, span: int, since: dt.datetime, until: dt.datetime) -> None:
        for row in self.aggregate(span=span, since=since, until=until):
            key = {"span": span, "bucket": row.bucket, "handler": row.handler}
            rollup, _ = JobRollup.objects.get_or_create(**key, task_id=row.task_id, state=row.state)
            for name in SUMS:
                setattr(rollup, name, getattr(rollup, name) + getattr(row, name))
            for name, count in zip(LAG_FIELDS, row.lags, strict=True):
                setattr(rollup, name, getattr(rollup, name) + count)
            rollup.save()

    def finished_groups(self) -> list[FinishedGroup]:
        finished = Job.objects.filter(finished_at__isnull=False, state__in=FINAL_STATES)
        rows = finished.values_list("handler", "payload", "state").iterator()
        return sorted({FinishedGroup(h, task_text(payload), state) for h, payload, state in rows})

    def delete_finished(self, rule: FinishedRule, *, now: dt.datetime, batch: int) -> int:
        group = rule.group
        candidates = Job.objects.filter(
            finished_at__lt=rule.before, state=group.state, handler=group.handler
        ).exclude(
            Exists(GraphRun.objects.filter(job_id=OuterRef("id")))
            | Exists(TaskRun.objects.filter(job_id=OuterRef("id")))
        )
        for task_id, period in _open_occurrences(now):
            # has_key first: a payload without the keys compares as NULL, and NOT NULL
            # would keep every such job.
            candidates = candidates.exclude(
                Q(payload__has_key="recurring_task_id")
                & Q(payload__recurring_task_id=task_id)
                & Q(payload__occurrence=period)
            )
        with tempo_atomic():
            rows = candidates.order_by("finished_at").values_list("id", "payload").iterator()
            ids = [job for job, payload in rows if task_text(payload) == group.task][:batch]
            return delete_rows(Job.objects.filter(id__in=ids))

    def count_finished(self, rule: FinishedRule) -> int:
        group = rule.group
        rows = Job.objects.filter(
            finished_at__lt=rule.before, state=group.state, handler=group.handler
        ).values_list("payload", flat=True)
        return sum(task_text(payload) == group.task for payload in rows.iterator())

    def table_sizes(self, tables: Sequence[str]) -> list[TableSize]:
        return []

    def job_indexes(self) -> list[IndexStats]:
        return []  # SQLite's embedded databases are small; VACUUM rewrites them whole

    def rebuilding(self) -> bool:
        return False

    def drop_failed_rebuilds(self) -> list[str]:
        return []

    def reindex(self, name: str) -> None:
        raise NotImplementedError("indexes are rebuilt only on PostgreSQL")


def delete_rows(rows) -> int:
    """One DELETE of these rows, without the ORM's collector (which reads each row first
    to cascade): retention checks itself that nothing refers to them."""
    return rows._raw_delete(rows.db) or 0


def lag_bucket(lag_ms: float) -> int:
    """The index of the histogram bucket a lag falls in."""
    for index, bound in enumerate(LAG_BOUNDS_MS):
        if lag_ms <= bound:
            return index
    return len(LAG_BOUNDS_MS)


def _task_id(payload) -> int:
    """The recurring task of a job's payload, as the PostgreSQL statement reads it."""
    value = payload.get("recurring_task_id") if isinstance(payload, dict) else None
    if isinstance(value, bool) or value is None:
        return 0
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else 0


def task_text(payload) -> str:
    """A job's recurring task as PostgreSQL's `payload ->> 'recurring_task_id'` reads it
    ("" for none): retention's group key."""
    value = payload.get("recurring_task_id") if isinstance(payload, dict) else None
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        return json.dumps(value)  # true, false, a float, an object: JSON text, as jsonb's
    return str(value)


def _open_occurrences(now: dt.datetime) -> set[tuple[int, int]]:
    """(task, period) of the slice plans whose jobs may still wait or retry."""
    plans = SlicePlan.objects.alias(until=F("ends_at") + F("period_length")).filter(until__gt=now)
    return set(plans.values_list("task_id", "period").distinct())


@cache
def store_for(postgres: bool) -> RetentionStore:
    return PostgresRetentionStore() if postgres else SqliteRetentionStore()


def retention_store() -> RetentionStore:
    return store_for(on_postgres())
