"""Operators' actions on every job a filter matches: retry, cancel or run now.

The jobs are read and changed in chunks of CHUNK_JOBS ids, in id order, each chunk's
change a transaction of its own (a savepoint, when the caller holds one): a
million matching jobs never make one long statement or hold their row locks together.
Each change is the transition's one owner in jobs.py (job_retry_many, ...), which the
single-job actions call too, guarded on the state: a job that moved meanwhile is not
changed. A call may stop
after `time_budget` seconds; its answer's `next_after` resumes it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.lookups import text_in
from tasksapp.engine.models import Job, JobState
from tasksapp.engine.options import MAX_PRIORITY, MIN_PRIORITY

from .jobs import (
    CANCEL_ASKABLE,
    RETRYABLE,
    WAITING,
    JobInputError,
    job_cancel_request_many,
    job_cancel_waiting_many,
    job_retry_many,
    job_run_now_many,
)

CHUNK_JOBS = 1000  # ids per statement
MAX_IDS = 100_000  # of a filter by ids
MAX_ID = 2**63  # bigint
MAX_TEXT_CHARS = 200  # of a text a filter searches for
BULK_ACTIONS = ("retry", "cancel", "run_now")
RANGES = {"run_at": "run_at", "created": "created_at", "finished": "finished_at"}
TEXT_FIELDS = {"handler_prefix", "queue", "error_contains", "key_contains"}
FILTER_FIELDS = frozenset(
    {"ids", "state", "priority", *TEXT_FIELDS}
    | {f"{name}_{end}" for name in RANGES for end in ("from", "to")}
)

ERR_ACTION = "action must be one of {choices} (got {value!r})."
ERR_FILTER_TYPE = "filter must be an object of criteria: {fields}."
ERR_FILTER_EMPTY = (
    "filter must name at least one criterion ({fields}); to act on every job in a state,"
    ' say so: {{"state": "dead"}}.'
)
ERR_FILTER_FIELDS = "filter has unknown criteria {names}: it takes {fields}."
ERR_IDS = "filter.ids must be a list of 1 to {max} job ids (whole numbers)."
ERR_STATE = "filter.state must be a state or a list of states, of {states} (got {value!r})."
ERR_PRIORITY = f"filter.priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}."
ERR_TEXT = "filter.{name} must be a non-empty text of at most {max} characters."
ERR_TIME = "filter.{name} must be an ISO 8601 date and time with a time zone (got {value!r})."
ERR_AFTER = "after must be a job id (a whole number), from an earlier answer's next_after."
ERR_BUDGET = "time_budget must be a positive number of seconds."


@dataclass(frozen=True)
class BulkResult:
    """What a bulk action did: the jobs the filter matched (read so far), those changed
    (on a dry run: those it would change now), and the id to resume after when it
    stopped at its time budget (None: every matching job was seen)."""

    action: str
    dry_run: bool
    matched: int
    changed: int
    next_after: int | None = None

    @property
    def complete(self) -> bool:
        return self.next_after is None


@dataclass(frozen=True)
class BulkAction:
    """One action's guard (the jobs it may change) and its set-based change of the
    chunk's ids that pass it; the change returns how many it changed."""

    eligible: Q
    change: Callable[[Sequence[int]], int]


def _cancel(ids: Sequence[int]) -> int:
    """As job_cancel: waiting jobs cancelled, claimed or running ones asked to stop."""
    return job_cancel_waiting_many(ids=ids) + job_cancel_request_many(ids=ids)


ACTIONS = {
    "retry": BulkAction(RETRYABLE, lambda ids: job_retry_many(ids=ids)),
    "cancel": BulkAction(WAITING | CANCEL_ASKABLE, _cancel),
    "run_now": BulkAction(WAITING, lambda ids: job_run_now_many(ids=ids)),
}


def job_bulk_action(
    *,
    action: str,
    filter: Mapping[str, Any],
    dry_run: bool = False,
    after: int | None = None,
    time_budget: float | None = None,
    on_chunk: Callable[[BulkResult], None] | None = None,
) -> BulkResult:
    """Retry, cancel or run now every job `filter` matches (see job_selection), chunk by
    chunk in id order from `after`; on a dry run count those it would change and change
    nothing. Stops after `time_budget` s (at a chunk's end) with `next_after` set;
    `on_chunk` hears the totals after each chunk."""
    chosen = _validated_action(action)
    selection = job_selection(filter=filter)
    after = _validated_after(after)
    deadline = None if time_budget is None else time.monotonic() + _validated_budget(time_budget)
    matched = changed = 0
    for ids, next_after in selection.chunks(after=after):
        matched += len(ids)
        if ids and dry_run:
            changed += Job.objects.filter(chosen.eligible, id__in=ids).count()
        elif ids:
            with tempo_atomic():  # the chunk's statements (cancel has two) as one
                changed += chosen.change(ids)
        if on_chunk is not None:
            on_chunk(BulkResult(action, dry_run, matched, changed, next_after))
        if next_after is not None and deadline is not None and time.monotonic() >= deadline:
            return BulkResult(action, dry_run, matched, changed, next_after)
    return BulkResult(action, dry_run, matched, changed)


def _validated_action(action: Any) -> BulkAction:
    if not isinstance(action, str) or action not in ACTIONS:
        raise JobInputError(ERR_ACTION.format(choices=", ".join(BULK_ACTIONS), value=action))
    return ACTIONS[action]


def _validated_after(after: Any) -> int:
    if after is None:
        return 0
    if isinstance(after, bool) or not isinstance(after, int):
        raise JobInputError(ERR_AFTER)
    return after


def _validated_budget(budget: Any) -> float:
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not budget > 0:
        raise JobInputError(ERR_BUDGET)
    return float(budget)


# --- the filter ------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSelection:
    """The jobs a filter matches: its criteria but the ids (`query`), and its ids."""

    query: Q
    ids: tuple[int, ...] | None = None

    def jobs(self) -> QuerySet[Job]:
        jobs = Job.objects.filter(self.query)
        return jobs if self.ids is None else jobs.filter(id__in=self.ids)

    def chunks(self, *, after: int = 0) -> Iterator[tuple[list[int], int | None]]:
        """The matching ids past `after`, at most CHUNK_JOBS at a time, in id order, each
        with the id to resume after (None after the last chunk): one indexed read a
        chunk (in the primary key's order, or among its own ids for a filter by ids)."""
        if self.ids is not None:
            wanted = sorted({i for i in self.ids if i > after})
            for start in range(0, len(wanted), CHUNK_JOBS):
                part = wanted[start : start + CHUNK_JOBS]
                more = start + CHUNK_JOBS < len(wanted)
                ids = self._ids_of(Job.objects.filter(self.query, id__in=part))
                yield ids, part[-1] if more else None
            return
        while ids := self._ids_of(Job.objects.filter(self.query, id__gt=after), CHUNK_JOBS):
            more = len(ids) == CHUNK_JOBS  # a full chunk: there may be more
            yield ids, ids[-1] if more else None
            if not more:
                return
            after = ids[-1]

    @staticmethod
    def _ids_of(jobs: QuerySet[Job], limit: int | None = None) -> list[int]:
        return list(jobs.order_by("id").values_list("id", flat=True)[:limit])


def job_selection(*, filter: Mapping[str, Any]) -> JobSelection:
    """The jobs a filter matches, every criterion checked (JobInputError names the bad
    one). Criteria, all of which must hold: `ids` (a list), `state` (one or a list),
    `handler_prefix`, `queue`, `priority`, `error_contains` (in the last error, any
    case), `key_contains` (in the idempotency key), and the ranges `run_at_from`/
    `run_at_to`, `created_from`/`created_to`, `finished_from`/`finished_to` (from
    inclusive, to exclusive; ISO 8601 with a time zone, or datetimes)."""
    fields = ", ".join(sorted(FILTER_FIELDS))
    if not isinstance(filter, Mapping):
        raise JobInputError(ERR_FILTER_TYPE.format(fields=fields))
    unknown = sorted(str(name) for name in filter if name not in FILTER_FIELDS)
    if unknown:
        raise JobInputError(ERR_FILTER_FIELDS.format(names=", ".join(unknown), fields=fields))
    if not filter:
        raise JobInputError(ERR_FILTER_EMPTY.format(fields=fields))
    query = Q()
    for name, value in filter.items():
        if name != "ids":
            query &= _criterion(name, value)
    ids = tuple(_ids(filter["ids"])) if "ids" in filter else None
    return JobSelection(query, ids)


def _criterion(name: str, value: Any) -> Q:
    if name == "state":
        return Q(state__in=_states(value))
    if name == "priority":
        return Q(priority=_priority(value))
    if name in TEXT_FIELDS:
        return _text_criterion(name, _text(name, value))
    field, end = name.rsplit("_", 1)
    lookup = "gte" if end == "from" else "lt"
    return Q(**{f"{RANGES[field]}__{lookup}": _moment(name, value)})


def _text_criterion(name: str, text: str) -> Q:
    return {
        "handler_prefix": Q(handler__startswith=text),
        "queue": Q(queue=text),
        "error_contains": Q(text_in("last_error", text)),  # the trigram indexes serve both
        "key_contains": Q(text_in("idempotency_key", text)),
    }[name]


def _ids(value: Any) -> list[int]:
    whole = isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and 0 < v < MAX_ID for v in value
    )
    if not whole or not 1 <= len(value) <= MAX_IDS:
        raise JobInputError(ERR_IDS.format(max=MAX_IDS))
    return value


def _states(value: Any) -> list[str]:
    states = [value] if isinstance(value, str) else value
    known = isinstance(states, list) and all(state in JobState.values for state in states)
    if not known or not states:
        raise JobInputError(ERR_STATE.format(states=", ".join(JobState.values), value=value))
    return states


def _priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobInputError(ERR_PRIORITY)
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise JobInputError(ERR_PRIORITY)
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TEXT_CHARS or "\x00" in value:
        raise JobInputError(ERR_TEXT.format(name=name, max=MAX_TEXT_CHARS))
    return value


def _moment(name: str, value: Any) -> dt.datetime:
    moment = value
    if isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            moment = None
    if not isinstance(moment, dt.datetime) or timezone.is_naive(moment):
        raise JobInputError(ERR_TIME.format(name=name, value=value))
    return moment
