"""Retention's reads: what a run would remove (for the command's progress bar), and how big
the growing tables are."""

from __future__ import annotations

import datetime as dt

from tasksapp.retention.services import finished_rules, rollup_mark
from tasksapp.retention.settings import retention_settings
from tasksapp.retention.store import TableSize, retention_store


def retention_backlog(*, now: dt.datetime) -> int:
    """Finished jobs past their age and rolled up: an upper bound of what a run removes
    (jobs a graph run or an open slice plan still needs are counted, and kept)."""
    store = retention_store()
    rolled_until = rollup_mark() or now
    rules = finished_rules(
        retention_settings(), store.finished_groups(), now=now, rolled_until=rolled_until
    )
    return sum(store.count_finished(rule) for rule in rules)


# The tables that grow with the work, whose size the dashboard's system section shows.
SIZED_TABLES = (
    "tasksapp_job",
    "tasksapp_job_search",  # the jobs' search rows (PostgreSQL)
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
