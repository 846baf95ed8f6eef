"""Reads for browsing jobs: a filtered list paged by keyset, and one job's timeline.

The list is ordered by (run_at, id), latest first, and pages by keyset (`before` the last
row shown): each page is one index range, whatever its depth, and nothing counts all
rows. Filters map onto indexes: state → `job_state_run_at_idx`, handler or recurring
task → `job_handler_run_at_idx`, none → `job_run_at_id_idx`; a member's jobs are found
by their idempotency keys (`plan:<task>:<period>:<member>`) in the unique index. The
three run-time indexes leave out the jobs in flight (claimed, running): without a state
filter those are read apart through `job_lease_idx` and merged into the page.

The handler filter is a prefix (`myjobs` finds `myjobs.billing.charge`): a range on
`handler` that `job_handler_run_at_idx` serves in any collation (a `LIKE 'x%'` would
need `text_pattern_ops`), with `startswith` kept for exactness. Queue and priority have
no index of their own: they filter the rows the run-time order reads.

Text is searched in the last error, the idempotency key and the payload (as JSON text),
in any case, over all jobs: on PostgreSQL `ILIKE '%text%'`, which trigram indexes serve:
`job_error_trgm_idx` on the jobs table (the jobs in flight left out: those are read
through job_lease_idx, as the list does), and for the key and the payload, which never
change, `job_search_key_trgm_idx` and `job_search_payload_trgm_idx` on their search rows,
written once when a job is inserted (migration 0028). A rare text is a list of the ids
whose rows match, read by the primary key beside the error's index and sorted; a common
one (more than SEARCH_IDS rows) reads the run-time order, looks up each job's row, and
stops at the page's end. A text without three letters or digits in a row has no trigram
for an index to look up: it alone is searched in a bounded window, the SEARCH_WINDOW
latest jobs matching the other filters before the cursor, and the page's next cursor
continues below that window.
SQLite (the embedded mode) has no such index: a plain scan.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from django.db.models import (
    Case,
    Exists,
    F,
    Func,
    IntegerField,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    TextField,
    Value,
    When,
)
from django.db.models.functions import Cast, Length
from django.db.models.lookups import GreaterThan

from tasksapp.engine.db import on_postgres
from tasksapp.engine.jsonvalues import safe_json
from tasksapp.engine.lookups import TextContains
from tasksapp.engine.models import LEASED_STATES, NOT_LEASED, Job, JobSearchText, JobState
from tasksapp.graphs.selectors import GraphView, graph_run_get, graph_run_id_for_job
from tasksapp.recurring.models import Member, RecurringTask, SlicePlan
from tasksapp.recurring.services import job_key_prefix
from tasksapp.web.models import OperatorAction

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MAX_CURSOR_CHARS = 200
MAX_ID = 2**63 - 1
# JSON columns a list page may leave unloaded when they are large (json_inline_chars).
LARGE_JSON = ("payload", "result", "errors", "history")
# A text without a trigram (three letters or digits in a row) is searched in at most
# this many jobs per page; any other text through the trigram indexes, over all jobs.
SEARCH_WINDOW = 10_000
# A text found in at most this many jobs' keys and payloads is looked up by their ids.
SEARCH_IDS = 5_000
TRIGRAM = re.compile(r"[^\W_]{3}")  # pg_trgm's words: letters and digits
MAX_TEXT = 200
MEMBER_PLANS = 400  # a member filter looks at this many of the latest slice plans
MAX_OPERATOR_EVENTS = 50  # a job's timeline shows at most this many operator actions
FINAL_STATE_VALUES = ("dead", "lost", "cancelled")
LIST_FIELDS = (
    "id",
    "handler",
    "state",
    "run_at",
    "created_at",
    "started_at",
    "finished_at",
    "attempts",
    "max_attempts",
    "delivery",
    "idempotency_key",
    "queue",
    "priority",
)

ERR_CURSOR = "cursor is not valid: use the link of the previous page."
ERR_STATE = "state must be one of: {choices}."
ERR_RANGE = "run_at_from must be before run_at_to."
ERR_PRIORITY = "priority must be a whole number from 0 to 9."
ERR_TEXT = f"text: at most {MAX_TEXT} characters."


class JobFilterError(ValueError):
    """A filter or cursor that cannot be applied; the message says which."""


@dataclass(frozen=True)
class JobFilters:
    state: str | None = None
    handler: str | None = None
    task: RecurringTask | None = None
    member: Member | None = None
    run_at_from: dt.datetime | None = None
    run_at_to: dt.datetime | None = None
    queue: str | None = None
    priority: int | None = None
    text: str | None = None  # in last_error, idempotency_key or payload


@dataclass
class JobPage:
    jobs: list[Job]
    next_cursor: str | None  # None on the last page
    filters: JobFilters = field(default_factory=JobFilters)
    # A search for a text without a trigram that read a whole window: the oldest run
    # time it reached (the next cursor goes on below it); None when the search reached
    # the end of the jobs, and for every other search.
    searched_to: dt.datetime | None = None


def cursor_encode(job: Job) -> str:
    raw = f"{job.run_at.isoformat()}|{job.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[dt.datetime, int]:
    """The (run_at, id) a cursor stands for; JobFilterError for anything else, however
    it was made (any text may come in as a cursor)."""
    try:
        if len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
            raise ValueError("not a cursor")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        when, job_id = raw.split("|")
        run_at = dt.datetime.fromisoformat(when)
        if run_at.tzinfo is None:
            raise ValueError("naive")
        run_at = run_at.astimezone(dt.UTC)  # the database compares in UTC: must exist there
        if not job_id.isascii() or not job_id.isdigit() or not 0 < int(job_id) <= MAX_ID:
            raise ValueError("not an id")
        return run_at, int(job_id)
    except (ValueError, OverflowError, UnicodeDecodeError, binascii.Error) as exc:
        raise JobFilterError(ERR_CURSOR) from exc


def _filtered(filters: JobFilters) -> QuerySet[Job]:
    jobs = Job.objects.all()
    if filters.state:
        if filters.state not in JobState.values:
            raise JobFilterError(ERR_STATE.format(choices=", ".join(JobState.values)))
        jobs = jobs.filter(state=filters.state)
    if filters.handler:
        jobs = jobs.filter(handler_prefix(filters.handler))
    if filters.queue:
        jobs = jobs.filter(queue=filters.queue)
    if filters.priority is not None:
        if not 0 <= filters.priority <= 9:
            raise JobFilterError(ERR_PRIORITY)
        jobs = jobs.filter(priority=filters.priority)
    if filters.task is not None:
        jobs = jobs.filter(
            handler=filters.task.handler, idempotency_key__startswith=f"plan:{filters.task.id}:"
        )
    if filters.member is not None:
        jobs = jobs.filter(idempotency_key__in=member_job_keys(member=filters.member))
    if filters.run_at_from and filters.run_at_to and filters.run_at_from >= filters.run_at_to:
        raise JobFilterError(ERR_RANGE)
    if filters.run_at_from:
        jobs = jobs.filter(run_at__gte=filters.run_at_from)
    if filters.run_at_to:
        jobs = jobs.filter(run_at__lt=filters.run_at_to)
    return jobs


def handler_prefix(prefix: str) -> Q:
    """Handlers starting with `prefix`, as an index range [prefix, next prefix) that a
    btree on `handler` serves, and `startswith` for exactness whatever the collation."""
    last = ord(prefix[-1])
    if last >= 0x10FFFF:  # no next character: the range is open above
        return Q(handler__gte=prefix, handler__startswith=prefix)
    upper = prefix[:-1] + chr(last + 1 if last + 1 not in range(0xD800, 0xE000) else 0xE000)
    return Q(handler__gte=prefix, handler__lt=upper, handler__startswith=prefix)


def text_indexed(text: str) -> bool:
    """Whether the trigram indexes can look the text up: it holds a trigram of letters
    or digits (a shorter word or punctuation alone gives pg_trgm none to search for)."""
    return TRIGRAM.search(text) is not None


def _text_match(jobs: QuerySet[Job], text: str, *, indexed: bool) -> QuerySet[Job]:
    """Jobs with `text` in their last error, idempotency key or payload (as JSON text).
    On PostgreSQL the key and the payload are searched in their search rows (migration
    0028): a text with at most SEARCH_IDS matches there is a list of ids, which the
    primary key serves beside the error's index; a commoner one is a lookup of each
    job's row as the run-time order reads it, which ends at the page's end. A text
    without a trigram is looked for in the rows of its window's jobs alone."""
    error = ~Q(last_error="") & TextContains(F("last_error"), text)  # the index's condition
    if not on_postgres(jobs.db):
        payload_text = Cast("payload", output_field=TextField())
        return jobs.filter(
            error | TextContains(F("idempotency_key"), text) | TextContains(payload_text, text)
        )
    rows = JobSearchText.objects.using(jobs.db).filter(
        TextContains(F("idempotency_key"), text)
        | (~Q(payload="{}") & TextContains(F("payload"), text))  # the index's condition
    )
    if not indexed:  # `jobs` is a window of at most SEARCH_WINDOW: its rows, by their ids
        window = list(jobs.values_list("id", flat=True))  # a list: probed by primary key
        ids = list(rows.filter(job_id__in=window).values_list("job_id", flat=True))
        return jobs.filter(error | Q(id__in=ids))
    ids = list(rows.values_list("job_id", flat=True)[: SEARCH_IDS + 1])
    if len(ids) <= SEARCH_IDS:
        return jobs.filter(error | Q(id__in=ids))
    return jobs.filter(error | Exists(rows.filter(job_id=OuterRef("id"))))


def _window_end(jobs: QuerySet[Job], *, by_state: bool) -> tuple[dt.datetime, int] | None:
    """The (run_at, id) of the SEARCH_WINDOW-th latest of `jobs` not in flight (an offset
    read of one index range), None when there are fewer."""
    if not by_state:
        jobs = jobs.filter(NOT_LEASED)
    ends = jobs.order_by("-run_at", "-id").values_list("run_at", "id")
    return ends[SEARCH_WINDOW - 1 : SEARCH_WINDOW].first()


def member_job_keys(*, member: Member, task: RecurringTask | None = None) -> list[str]:
    """The idempotency keys of the member's planned jobs in the latest slice plans that
    contain its phase (of one task if given)."""
    plans = SlicePlan.objects.order_by("-planned_at")
    if task is not None:
        plans = plans.filter(task=task)
    return [
        f"{job_key_prefix(plan.task_id, plan.period)}{member.id}"
        for plan in plans[:MEMBER_PLANS]
        if plan.contains(member.phase)
    ]


def job_page(
    *,
    filters: JobFilters,
    cursor: str | None = None,
    limit: int = PAGE_SIZE,
    columns: tuple[str, ...] | None = LIST_FIELDS,
    json_inline_chars: int | None = None,
) -> JobPage:
    """One page of jobs matching `filters`, latest run time first, after `cursor`; only
    `columns` are loaded (None: all of them). At most MAX_PAGE_SIZE rows.

    With `json_inline_chars`, a job's payload, result or errors longer than that as JSON
    text is not read from the database: it is None on the job and its name is in the
    job's `omitted_json` (so a page of jobs with megabyte payloads stays small)."""
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    jobs = _filtered(filters)
    if cursor:
        run_at, job_id = cursor_decode(cursor)
        # run_at <= bound keeps it one index range; the OR only breaks ties on run_at.
        jobs = jobs.filter(Q(run_at__lt=run_at) | Q(id__lt=job_id), run_at__lte=run_at)
    if columns is not None:
        jobs = jobs.only(*columns)
    window_end = None
    if filters.text:
        if len(filters.text) > MAX_TEXT:
            raise JobFilterError(ERR_TEXT)
        indexed = text_indexed(filters.text)
        if not indexed:
            window_end = _window_end(jobs, by_state=bool(filters.state))
        if window_end is not None:
            end_at, end_id = window_end
            jobs = jobs.filter(Q(run_at__gt=end_at) | Q(run_at=end_at, id__gte=end_id))
        jobs = _text_match(jobs, filters.text, indexed=indexed)
    if json_inline_chars is not None:
        jobs = _large_json_left_out(jobs, json_inline_chars)
    rows = _latest(jobs, limit + 1, by_state=bool(filters.state))
    more = len(rows) > limit
    rows = rows[:limit]
    if json_inline_chars is not None:
        for job in rows:
            _inline_json(job, json_inline_chars)
    if more and rows:
        return JobPage(rows, cursor_encode(rows[-1]), filters)
    if window_end is not None:  # the window is read: the next page searches below it
        end = Job(run_at=window_end[0], id=window_end[1])
        return JobPage(rows, cursor_encode(end), filters, searched_to=window_end[0])
    return JobPage(rows, None, filters)


def _latest(jobs: QuerySet[Job], count: int, *, by_state: bool) -> list[Job]:
    """The first `count` of `jobs` by (run_at, id), latest first. Filtered by state, one
    index range. Otherwise the jobs in flight, which the run-time indexes leave out, are
    read apart (a few, through job_lease_idx) and merged with the others."""
    latest = ("-run_at", "-id")
    if by_state:
        return list(jobs.order_by(*latest)[:count])
    settled = list(jobs.filter(NOT_LEASED).order_by(*latest)[:count])
    in_flight = list(jobs.filter(state__in=LEASED_STATES).order_by(*latest)[:count])
    merged = sorted(settled + in_flight, key=lambda job: (job.run_at, job.id), reverse=True)
    return merged[:count]


class StoredSize(Func):
    """A column's size as stored, in bytes, without reading a TOASTed value (PostgreSQL);
    SQLite stores JSON as text: its length."""

    function = "pg_column_size"
    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, function="LENGTH", **extra_context)


def _large_json_left_out(jobs: QuerySet[Job], chars: int) -> QuerySet[Job]:
    """Each large JSON column read only when short: `<name>_inline` (the value, or NULL
    when longer than `chars`) and `<name>_chars` (its length), the column deferred.

    A value is first measured as stored (`pg_column_size`: compressed, read from the
    row's TOAST pointer without fetching the value); only one stored in at most `chars`
    bytes is read to count its characters. A megabyte payload is never read."""
    annotations = {}
    for name in LARGE_JSON:
        stored = StoredSize(F(name))
        length = Case(
            When(GreaterThan(stored, chars), then=stored),  # more characters than that
            default=Length(Cast(name, output_field=TextField())),
        )
        annotations[f"{name}_chars"] = length
        annotations[f"{name}_inline"] = Case(
            When(**{f"{name}_chars__lte": chars}, then=F(name)),
            default=Value(None),
            output_field=JSONField(),
        )
    return jobs.annotate(**annotations).defer(*LARGE_JSON)


def _inline_json(job: Job, chars: int) -> None:
    omitted = []
    for name in LARGE_JSON:
        length = getattr(job, f"{name}_chars")
        if length is not None and length > chars:
            omitted.append(name)
        setattr(job, name, getattr(job, f"{name}_inline"))
    job.omitted_json = tuple(omitted)


def job_get(*, job_id: int) -> Job | None:
    """The job, its JSON columns readable whatever a row stored before the JSON checks
    holds (a lone surrogate becomes U+FFFD: the page can always be encoded)."""
    job = Job.objects.filter(id=job_id).first()
    if job is not None:
        for name in ("payload", "result", "errors", "retry_policy", "history"):
            setattr(job, name, safe_json(getattr(job, name)))
        job.last_error = safe_json(job.last_error)
    return job


# --- one job's timeline -------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineEvent:
    at: dt.datetime
    label: str
    detail: str = ""
    kind: str = "info"  # info | ok | error


def job_timeline(*, job: Job) -> list[TimelineEvent]:
    """What happened to the job, in time order: created, each failed attempt with its
    error, each event of its history (snoozes, cancels with their reason), a cancel
    request, and the current attempt's run time, claim, start and finish."""
    events = [TimelineEvent(job.created_at, "created", f"key {job.idempotency_key}")]
    history = _history_events(job)
    events += history
    if job.cancel_requested_at:
        detail = "the handler stops where it checks; else at its end or time limit"
        events.append(TimelineEvent(job.cancel_requested_at, "cancel requested", detail))
    for entry in job.errors or []:
        at = _parse_time(entry.get("at")) if isinstance(entry, dict) else None
        if at is None:
            continue
        detail = f"{entry.get('kind', 'error')}: {entry.get('error', '')}"
        events.append(
            TimelineEvent(at, f"attempt {entry.get('attempt', '?')} failed", detail, "error")
        )
    events += _operator_events(job)  # after the failures: a final state follows the last
    events.append(TimelineEvent(job.run_at, "run at", "due (the latest attempt)"))
    if job.claimed_at:
        events.append(TimelineEvent(job.claimed_at, "claimed", job.claimed_by))
    if job.started_at:
        events.append(TimelineEvent(job.started_at, "started", _start_detail(job)))
    if job.finished_at and job.state == JobState.SUCCEEDED:
        events.append(TimelineEvent(job.finished_at, job.state, "", "ok"))
    elif job.finished_at and job.state == JobState.CANCELLED:
        if not _cancel_in_history(history, job.finished_at):
            events.append(TimelineEvent(job.finished_at, job.state, job.last_error))
    elif job.finished_at and job.state in (JobState.DEAD, JobState.LOST):
        events.append(TimelineEvent(job.finished_at, job.state, job.last_error, "error"))
    return sorted(events, key=lambda e: e.at)


def _start_detail(job: Job) -> str:
    """The attempt and its lag behind the run time. A start before the run time belongs
    to an earlier run (the job was retried or snoozed since): no lag to tell."""
    if job.started_at < job.run_at:
        return f"attempt {job.attempts}, before the job was due again"
    lag = (job.started_at - job.run_at).total_seconds() * 1000
    return f"attempt {job.attempts}, lag {lag:.0f} ms"


def _operator_events(job: Job) -> list[TimelineEvent]:
    """The operators' actions on the job (the audit log). A retry also tells the final
    state it took the job out of, which the job no longer holds: shown when the job
    ended, at its last failed attempt (or just before the retry)."""
    events = []
    actions = OperatorAction.objects.filter(target_type="job", target_id=str(job.id))
    for action in actions.order_by("at")[:MAX_OPERATOR_EVENTS]:
        details = action.details if isinstance(action.details, dict) else {}
        before = details.get("state_before")
        who = action.username or "someone"
        detail = f"by {who} via {action.via}" + (f", was {before}" if before else "")
        events.append(TimelineEvent(action.at, action.action.replace("_", " "), detail))
        if action.action == "retry" and before in FINAL_STATE_VALUES:
            ended = _last_failure_before(job, action.at) or action.at
            kind = "info" if before == JobState.CANCELLED else "error"
            events.append(TimelineEvent(ended, before, "ended (until the retry)", kind))
    return events


def _last_failure_before(job: Job, moment: dt.datetime) -> dt.datetime | None:
    times = [
        at
        for entry in job.errors or []
        if isinstance(entry, dict) and (at := _parse_time(entry.get("at"))) is not None
    ]
    earlier = [at for at in times if at <= moment]
    return max(earlier) if earlier else None


def _history_events(job: Job) -> list[TimelineEvent]:
    """Every entry of the job's history, by its kind: a snooze (the attempt and its
    delay), a cancel (its reason: an operator's request, or a check before the handler,
    such as a member that left its audience); any other kind with its fields."""
    events = []
    for entry in job.history or []:
        at = _parse_time(entry.get("at")) if isinstance(entry, dict) else None
        if at is None:
            continue
        event = str(entry.get("event") or "event")
        events.append(TimelineEvent(at, event, _history_detail(event, entry)))
    return events


def _history_detail(event: str, entry: dict) -> str:
    if event == "snoozed":
        attempt, seconds = entry.get("attempt", "?"), entry.get("seconds")
        return f"attempt {attempt} asked to run again in {seconds} s"
    if event == "cancelled":
        return str(entry.get("reason") or "")
    return ", ".join(f"{key} {value}" for key, value in entry.items() if key not in ("event", "at"))


# A cancel of a running job writes its history entry and its finish in one statement
# (each at its own clock reading): the entry is that finish, not another event.
SAME_CANCEL = dt.timedelta(seconds=1)


def _cancel_in_history(history: list[TimelineEvent], finished_at: dt.datetime) -> bool:
    return any(e.label == "cancelled" and abs(e.at - finished_at) < SAME_CANCEL for e in history)


def _parse_time(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


# --- graph jobs ---------------------------------------------------------------------------


def job_graph(*, job: Job) -> GraphView | None:
    """The task graph a job belongs to — as the graph job itself, one of its task jobs or
    its rollback job — layer by layer from its GraphRun and TaskRuns; None for a plain job."""
    graph_run_id = graph_run_id_for_job(job_id=job.id)
    return None if graph_run_id is None else graph_run_get(graph_run_id=graph_run_id)
