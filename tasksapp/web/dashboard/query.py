"""Reading a dashboard page's query string. Any text may come in — NUL bytes, digits of
other scripts (`²` is a digit to str.isdigit, not to int), numbers beyond any id, dates
beyond the calendar, thousands of characters — so every parameter a page reads goes
through one of these, and a bad one becomes a message naming it. The page then answers
400 with the message shown and the parameter not applied; nothing reaches a query.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata

from django.http import QueryDict

from tasksapp.recurring.models import Member, RecurringTask
from tasksapp.recurring.selectors.schedules import recurring_task_schedule
from tasksapp.web.selectors.jobs import JobFilters

MAX_TEXT = 200  # the longest text filter: handler names, external ids, cursors
MAX_ID = 2**63 - 1
WHOLE_RE = re.compile(r"[0-9]{1,19}")  # ASCII digits only
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)  # far from datetime.max, in any zone

ERR_CONTROL = "{name}: control characters (such as NUL) are not allowed."
ERR_LONG = "{name}: at most {limit} characters."
ERR_WHOLE = "{name} must be a whole number from {low} to {high}."
ERR_WHOLES = "{name}: at most {most} job ids (whole numbers from 1)."
ERR_TIME = "{name}: not a date and time (use YYYY-MM-DD HH:MM, UTC)."
ERR_TIME_RANGE = "{name}: a date and time between 1970 and 9000."
ERR_FILTER_TASK = "task: no recurring task with id {value}."
ERR_FILTER_MEMBER = "member: no member with external id {value!r}."
# The job list's filters, as its form names them.
JOB_FILTERS = (
    "state",
    "handler",
    "queue",
    "priority",
    "task",
    "member",
    "run_at_from",
    "run_at_to",
    "text",
)


class BadQuery(ValueError):
    """A query parameter that cannot be applied; the message names it."""


def text(query: QueryDict, name: str, *, limit: int = MAX_TEXT) -> str:
    """The parameter, stripped ("" when absent), printable and at most `limit` long."""
    value = query.get(name, "").strip()
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in value):
        raise BadQuery(ERR_CONTROL.format(name=name))
    if len(value) > limit:
        raise BadQuery(ERR_LONG.format(name=name, limit=limit))
    return value


def whole(query: QueryDict, name: str, *, low: int = 1, high: int = MAX_ID) -> int | None:
    """The parameter as an integer from `low` to `high` (None when absent)."""
    value = text(query, name)
    if not value:
        return None
    if not WHOLE_RE.fullmatch(value) or not low <= int(value) <= high:
        raise BadQuery(ERR_WHOLE.format(name=name, low=low, high=high))
    return int(value)


def wholes(query: QueryDict, name: str, *, most: int) -> list[int]:
    """All values of the parameter (a form's ticked boxes) as ids, in order, each once;
    [] when absent. More than `most`, or any that is not an id: refused."""
    values = query.getlist(name)
    ids = all(WHOLE_RE.fullmatch(v) and 0 < int(v) <= MAX_ID for v in values)
    if len(values) > most or not ids:
        raise BadQuery(ERR_WHOLES.format(name=name, most=most))
    return sorted({int(v) for v in values})


def time(query: QueryDict, name: str) -> dt.datetime | None:
    """The parameter as an aware date and time (naive: UTC), None when absent."""
    value = text(query, name, limit=40)
    if not value:
        return None
    try:
        if not value.isascii():
            raise ValueError(value)
        when = dt.datetime.fromisoformat(value)
    except ValueError as exc:
        raise BadQuery(ERR_TIME.format(name=name)) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    try:
        when = when.astimezone(dt.UTC)
    except OverflowError as exc:  # 0001-01-01 east of UTC, 9999-12-31 west of it
        raise BadQuery(ERR_TIME_RANGE.format(name=name)) from exc
    if not EARLIEST <= when <= LATEST:
        raise BadQuery(ERR_TIME_RANGE.format(name=name))
    return when


def plan_period(query: QueryDict, task: RecurringTask, name: str = "period") -> int | None:
    """A period of `task` to show: from 0 to the last one that starts before 9000 (its
    dates must exist); None when absent."""
    last = max(recurring_task_schedule(task=task).latest.period_at(LATEST) - 1, 0)
    return whole(query, name, low=0, high=last)


def job_filter_fields(query: QueryDict) -> list[tuple[str, str]]:
    """The job list's filters `query` sets, as (name, value) form fields, in form order."""
    pairs = [(name, query.get(name, "").strip()) for name in JOB_FILTERS]
    return [(name, value) for name, value in pairs if value]


def job_filters(query: QueryDict) -> tuple[JobFilters, list[str]]:
    """The job list's filters (JOB_FILTERS) read from `query`, and the messages of those
    refused (each left out)."""
    errors: list[str] = []

    def read(parse, name: str, **options):
        try:
            return parse(query, name, **options)
        except BadQuery as exc:
            errors.append(str(exc))
            return None

    task = member = None
    task_id = read(whole, "task")
    if task_id is not None:
        task = RecurringTask.objects.filter(id=task_id).first()
        if task is None:
            errors.append(ERR_FILTER_TASK.format(value=task_id))
    external_id = read(text, "member")
    if external_id:
        member = Member.objects.filter(external_id=external_id).first()
        if member is None:
            errors.append(ERR_FILTER_MEMBER.format(value=external_id))
    filters = JobFilters(
        state=read(text, "state") or None,
        handler=read(text, "handler") or None,
        task=task,
        member=member,
        run_at_from=read(time, "run_at_from"),
        run_at_to=read(time, "run_at_to"),
        queue=read(text, "queue") or None,
        priority=read(whole, "priority", low=0, high=9),
        text=read(text, "text") or None,
    )
    return filters, errors
