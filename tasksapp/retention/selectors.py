"""Retention's reads: what a run would remove (for the command's progress bar), and how big
the growing tables are."""

from __future__ import annotations

import datetime as dt

from django.db.models import Q

from tasksapp.engine.models import Job
from tasksapp.retention.services import finished_rules, rollup_mark
from tasksapp.retention.settings import retention_settings
from tasksapp.retention.store import TableSize, retention_store


def retention_backlog(*, now: dt.datetime) -> int:
    """Finished jobs past their age and rolled up: an upper bound of what a run removes
    (jobs a graph run or an open slice plan still needs are counted, and kept)."""
    cfg = retention_settings()
    rolled_until = rollup_mark() or now
    match = Q(pk__in=[])
    for rule in finished_rules(cfg, now=now, rolled_until=rolled_until):
        scope = Q(finished_at__lt=rule.before, state__in=rule.states)
        if rule.handlers is not None:
            scope &= Q(handler__in=rule.handlers)
        match |= scope & ~Q(handler__in=rule.except_handlers)
    return Job.objects.filter(match).count()


# The tables that grow with the work, whose size the dashboard's system section shows.
SIZED_TABLES = (
    "tasksapp_job",
    "tasksapp_jobrollup",
    "tasksapp_sliceplan",
    "tasksapp_graphrun",
    "tasksapp_taskrun",
    "tasksapp_operatoraction",
    "tasksapp_dispatchercounter",
    "tasksapp_dispatcher",
    "tasksapp_workerprocess",
    "tasksapp_member",
)


def table_sizes() -> list[TableSize]:
    """Size of each growing table and of its indexes, with its dead rows and last
    autovacuum (PostgreSQL; empty on SQLite)."""
    return retention_store().table_sizes(SIZED_TABLES)
