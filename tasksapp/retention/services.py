"""Retention's writes: roll finished jobs up (`rollup_write`), then remove what is past
its age in small batches (`retention_run`). Run by beat every 5 minutes and by
`manage.py retention_run`; two runs at once are safe (the rollup mark is locked, removals
skip rows another run holds).

What is never removed: a job that can still run (scheduled, claimed, running, failed with
attempts left: only finished states qualify), a job a graph run points at (removed with
its finished graph run), a planned job whose slice plan still takes jobs or retries, a
job not rolled up yet, the latest slice plan of a task (the planner continues after it).
Why the planner cannot re-create an occurrence whose job was removed: it plans a slice
only once, when its `SlicePlan` row is created (unique per task, period and slice), only
after the task's latest plan, and never a slice that ended more than the late grace ago;
members add jobs only to plans still open, whose jobs are kept.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from django.apps import apps
from django.db.models import F, Min
from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.handlers import registry
from tasksapp.engine.models import FINAL_STATES, Dispatcher, DispatcherCounter, Job, WorkerProcess
from tasksapp.graphs.models import GRAPH_FINAL_STATES, GraphRun, TaskRun
from tasksapp.recurring.models import RecurringTask, SlicePlan
from tasksapp.recurring.selectors.schedules import slice_plan_last_key
from tasksapp.retention.indexes import index_rebuild_bloated
from tasksapp.retention.models import HOUR, MINUTE, SPANS, JobRollup, RollupMark
from tasksapp.retention.settings import RetentionSettings, retention_settings
from tasksapp.retention.store import (
    FinishedGroup,
    FinishedRule,
    bucket_start,
    delete_rows,
    retention_store,
)

ROLLUP_CHUNK = dt.timedelta(hours=6)  # finished jobs rolled up per transaction
# The audit log is the web feature's: named by label, as a foreign key would name it.
AUDIT_MODEL = "tasksapp.OperatorAction"

Progress = Callable[[str, int], None]


def _no_progress(what: str, removed: int) -> None:
    pass


@dataclass
class RetentionReport:
    """What one run did: rows removed per kind, indexes rebuilt."""

    rolled_until: dt.datetime | None = None
    removed: dict[str, int] = field(default_factory=dict)
    rebuilt: list[str] = field(default_factory=list)

    def add(self, what: str, count: int) -> None:
        self.removed[what] = self.removed.get(what, 0) + count

    def as_dict(self) -> dict:
        until = self.rolled_until.isoformat() if self.rolled_until else None
        return {"rolled_until": until, "removed": dict(self.removed), "rebuilt": self.rebuilt}


# --- rollups ------------------------------------------------------------------------------


def rollup_mark() -> dt.datetime | None:
    """Every job that finished before this is in the rollups (None: nothing rolled yet)."""
    return RollupMark.objects.values_list("until", flat=True).first()


def rollup_write(*, now: dt.datetime | None = None) -> dt.datetime:
    """Add the jobs that finished since the mark, up to `ROLLUP_DELAY_SECONDS` ago, to the
    per-minute and per-hour rollups, and move the mark: a few hours per transaction, each
    finish counted exactly once."""
    now = now or timezone.now()
    until = now - dt.timedelta(seconds=retention_settings().rollup_delay_seconds)
    while True:
        with tempo_atomic():
            mark = _locked_mark(until)
            if mark is None:  # another run is rolling up: it moves the mark
                return rollup_mark()
            if mark.until >= until:
                return mark.until
            since = _next_finish(mark.until) or until  # a quiet stretch is skipped
            step = min(since + ROLLUP_CHUNK, until)
            for span in SPANS:
                retention_store().roll_up(span=span, since=mark.until, until=step)
            mark.until = step
            mark.save(update_fields=["until"])


def _next_finish(after: dt.datetime) -> dt.datetime | None:
    return Job.objects.filter(finished_at__gte=after).aggregate(first=Min("finished_at"))["first"]


def _locked_mark(until: dt.datetime) -> RollupMark | None:
    """The mark, locked, or None while another run holds it (never waited for: a first
    run after an upgrade may take long). A first run starts at the oldest finish, on a
    bucket boundary."""
    if not RollupMark.objects.filter(pk=1).exists():
        oldest = Job.objects.aggregate(oldest=Min("finished_at"))["oldest"] or until
        RollupMark.objects.get_or_create(pk=1, defaults={"until": bucket_start(oldest, HOUR)})
    return RollupMark.objects.select_for_update(skip_locked=True).filter(pk=1).first()


# --- removal ------------------------------------------------------------------------------


def finished_rules(
    cfg: RetentionSettings,
    groups: Iterable[FinishedGroup],
    *,
    now: dt.datetime,
    rolled_until: dt.datetime,
) -> Iterator[FinishedRule]:
    """One rule per group of finished jobs, at its age (`job_days`): a recurring task's
    own, else its handler's, else the default. No rule reaches past the rollup mark."""
    task_ages = recurring_task_ages()
    handler_ages = registry.retention()
    for group in groups:
        days = job_days(cfg, group, task_ages=task_ages, handler_ages=handler_ages)
        yield FinishedRule(group, min(now - dt.timedelta(days=days), rolled_until))


def job_days(
    cfg: RetentionSettings,
    group: FinishedGroup,
    *,
    task_ages: dict[str, dict[str, float]],
    handler_ages: dict[str, dict[str, float]],
) -> float:
    """Days a finished job of `group` is kept: the recurring task's age for its state,
    else the handler's from TEMPO_RETENTION_HANDLER_DAYS, else the handler's declared one
    (`@job_handler(retention=...)`), else the state's default."""
    for ages in (
        task_ages.get(group.task, {}),
        cfg.handler_days.get(group.handler, {}),
        handler_ages.get(group.handler, {}),
    ):
        if group.state in ages:
            return ages[group.state]
    return cfg.job_days[group.state]


def recurring_task_ages() -> dict[str, dict[str, float]]:
    """Recurring tasks with their own ages, by id as retention's groups name them."""
    overridden = RecurringTask.objects.exclude(retention={}).values_list("id", "retention")
    return {str(task): ages for task, ages in overridden if isinstance(ages, dict)}


def retention_run(
    *, now: dt.datetime | None = None, progress: Progress = _no_progress
) -> RetentionReport:
    """Roll up, then remove everything past its age in batches of `BATCH_SIZE`, pausing
    `BATCH_PAUSE_SECONDS` between statements, then rebuild the jobs table's bloated
    indexes. `progress(kind, n)` hears of each batch."""
    now = now or timezone.now()
    cfg = retention_settings()
    report = RetentionReport(rolled_until=rollup_write(now=now))

    def drain(kind: str, remove_batch: Callable[[], int], limit: int = cfg.batch_size) -> None:
        while True:
            removed = remove_batch()
            report.add(kind, removed)
            progress(kind, removed)
            if removed < limit:
                return
            time.sleep(cfg.batch_pause_seconds)

    groups = retention_store().finished_groups()
    for rule in finished_rules(cfg, groups, now=now, rolled_until=report.rolled_until):
        drain("jobs", lambda rule=rule: _finished_batch(rule, now, cfg.batch_size))
    graphs_before = min(now - dt.timedelta(days=cfg.graph_run_days), report.rolled_until)
    graph_limit = max(1, cfg.batch_size // 20)
    drain("graph_runs", lambda: _graph_batch(graphs_before, graph_limit), graph_limit)
    drain("slice_plans", lambda: _slice_plan_batch(now, cfg))
    for kind, rows in _dated_rows(cfg, now):
        drain(kind, lambda rows=rows: _raw_batch(rows, cfg.batch_size))
    report.rebuilt = index_rebuild_bloated(cfg=cfg)
    return report


def _finished_batch(rule: FinishedRule, now: dt.datetime, batch: int) -> int:
    with tempo_atomic():
        return retention_store().delete_finished(rule, now=now, batch=batch)


def _graph_batch(before: dt.datetime, limit: int) -> int:
    """Finished graph runs, each with its task runs, its graph job and its task jobs; a
    run with a job not finished yet waits. Counted in graph runs."""
    with tempo_atomic():
        parents = dict(
            GraphRun.objects.select_for_update(skip_locked=True)
            .filter(state__in=GRAPH_FINAL_STATES, finished_at__lt=before)
            .order_by("finished_at")
            .values_list("id", "job_id")[:limit]
        )
        jobs_of = {graph: {job} for graph, job in parents.items()}
        children = TaskRun.objects.filter(graph_run_id__in=parents, job_id__isnull=False)
        for graph, job in children.values_list("graph_run_id", "job_id"):
            jobs_of[graph].add(job)
        every_job = set().union(*jobs_of.values())
        live = set(
            Job.objects.filter(id__in=every_job)
            .exclude(state__in=FINAL_STATES)
            .values_list("id", flat=True)
        )
        done = [graph for graph, jobs in jobs_of.items() if not jobs & live]
        jobs = set().union(*(jobs_of[graph] for graph in done))
        delete_rows(TaskRun.objects.filter(graph_run_id__in=done))
        delete_rows(GraphRun.objects.filter(id__in=done))
        delete_rows(Job.objects.filter(id__in=jobs))
        return len(done)


def _slice_plan_batch(now: dt.datetime, cfg: RetentionSettings) -> int:
    """Slice plans whose jobs stopped retrying `SLICE_PLAN_DAYS` ago; never a task's
    latest, after which the planner continues."""
    before = now - dt.timedelta(days=cfg.slice_plan_days)
    latest = []
    for task in RecurringTask.objects.all():
        key = slice_plan_last_key(task=task)
        if key is not None:
            latest.append((task.id, key.period, key.index))
    old = SlicePlan.objects.alias(until=F("ends_at") + F("period_length")).filter(until__lt=before)
    ids = [
        plan_id
        for plan_id, task, period, index in old.order_by("ends_at").values_list(
            "id", "task_id", "period", "slice_index"
        )[: cfg.batch_size + len(latest)]
        if (task, period, index) not in latest
    ][: cfg.batch_size]
    return delete_rows(SlicePlan.objects.filter(id__in=ids))


def _dated_rows(cfg: RetentionSettings, now: dt.datetime):
    """(kind, queryset) of the bookkeeping rows older than their age."""

    def older(days: float) -> dt.datetime:
        return now - dt.timedelta(days=days)

    audit = apps.get_model(AUDIT_MODEL)
    return [
        ("audit", audit.objects.filter(at__lt=older(cfg.audit_days))),
        ("dispatchers", Dispatcher.objects.filter(heartbeat_at__lt=older(cfg.heartbeat_days))),
        ("workers", WorkerProcess.objects.filter(heartbeat_at__lt=older(cfg.heartbeat_days))),
        ("counters", DispatcherCounter.objects.filter(minute__lt=older(cfg.counter_days))),
        (
            "minute_rollups",
            JobRollup.objects.filter(span=MINUTE, bucket__lt=older(cfg.minute_rollup_days)),
        ),
        (
            "hour_rollups",
            JobRollup.objects.filter(span=HOUR, bucket__lt=older(cfg.hour_rollup_days)),
        ),
    ]


def _raw_batch(rows, batch: int) -> int:
    ids = list(rows.order_by("pk").values_list("pk", flat=True)[:batch])
    return delete_rows(rows.model.objects.filter(pk__in=ids))
