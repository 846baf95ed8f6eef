"""Retention's reads: what a run would remove (for the command's progress bar)."""

from __future__ import annotations

import datetime as dt

from django.db.models import Q

from tasksapp.engine.models import Job
from tasksapp.retention.services import finished_rules, rollup_mark
from tasksapp.retention.settings import retention_settings


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
