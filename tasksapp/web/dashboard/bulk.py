"""Bulk actions on the job list: retry, run now or cancel every job the list's filters
match, or the rows ticked on its page.

GET /jobs/bulk/<action>/ asks first: it counts the jobs with the service's dry run
(nothing changes, nothing is recorded) and says how many match and how many the action
would change. Its form posts to the same URL with the CSRF token; the POST acts through
the chunked, audited service of POST /api/jobs/bulk/ (tasksapp/web/bulk.py), for about
BULK_SECONDS at most. When work is left the page says how far it got, and its "Go on"
form posts again from the service's `next_after`: every matching job up to that id has
been seen, none after it, so nothing is lost and nothing is done twice. Each request is
one audit row (`bulk_<action>`, its filter and counts), as on the API; a viewer's POST is
refused and recorded by `operator_required` (access.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from tasksapp.engine.services import BulkResult, JobInputError
from tasksapp.web.bulk import job_bulk_action_audited
from tasksapp.web.dashboard import query as params
from tasksapp.web.dashboard.access import operator_required
from tasksapp.web.models import OperatorAction
from tasksapp.web.selectors.jobs import ERR_RANGE, MAX_PAGE_SIZE, JobFilters
from tasksapp.web.templatetags.tempo import num

# A request stops changing jobs after this long (at the end of a chunk of 1,000), as the
# API's do; the page then offers to go on.
BULK_SECONDS = 20.0
SCOPES = ("filter", "selected")
# The list's filters the service can apply exactly, and the service's name for each.
BULK_FILTERS = {
    "state": "state",
    "handler": "handler_prefix",
    "queue": "queue",
    "priority": "priority",
    "run_at_from": "run_at_from",
    "run_at_to": "run_at_to",
}
NOT_BULK_FILTERS = ("task", "member", "text")
# How the confirmation page names each of the list's filters.
FILTER_WORDS = {
    "state": "state is",
    "handler": "handler starts with",
    "queue": "queue is",
    "priority": "priority is",
    "task": "recurring task",
    "member": "member",
    "run_at_from": "run at from (UTC)",
    "run_at_to": "run at before (UTC)",
    "text": "text",
}


@dataclass(frozen=True)
class Verb:
    service: str  # the service's name for the action
    button: str
    question: str  # "{what}; retry them?"
    can: str  # which jobs it changes
    done: str  # "{changed} of ..."


VERBS = {
    "retry": Verb(
        "retry",
        "Retry",
        "retry them?",
        "can be retried (dead, lost, cancelled or failed): each is scheduled again, to run now",
        "scheduled again, to run now",
    ),
    "run-now": Verb(
        "run_now",
        "Run now",
        "run them now?",
        "are waiting (scheduled or failed): each becomes due now",
        "made due now",
    ),
    "cancel": Verb(
        "cancel",
        "Cancel",
        "cancel them?",
        "can be cancelled: waiting ones end cancelled at once, claimed or running ones are"
        " asked to stop",
        "cancelled (or asked to stop, when running)",
    ),
}

ERR_SCOPE = "scope must be one of: {choices}."
ERR_NO_FILTER = (
    "Filter the list first (state, handler, queue, priority or run time): an action on"
    " every job at once is not offered."
)
ERR_NOT_BULK_FILTER = (
    "These filters cannot choose the jobs of a bulk action: {names} (only state, handler,"
    " queue, priority and run time can); tick the rows instead, or clear them."
)
ERR_NONE_TICKED = "Tick at least one job in the list first."


class BulkInputError(ValueError):
    """A bulk action asked for with input that cannot be applied; the message says why."""


@dataclass(frozen=True)
class BulkAsk:
    """What an operator asked for: the action, which jobs (`filter`, in the service's
    terms), and the form fields that ask for it again (`fields`)."""

    verb: Verb
    action: str  # as in the URL: retry, run-now, cancel
    scope: str
    filter: dict[str, Any]
    fields: list[tuple[str, str]]
    back_url: str

    @property
    def described(self) -> list[tuple[str, str]]:
        """The list's filters it carries, in words: [("state is", "dead"), ...]."""
        return [(FILTER_WORDS[name], value) for name, value in self.fields if name in FILTER_WORDS]


def back_url(query: QueryDict) -> str:
    """The job list with the filters `query` carries (only those), to go back to."""
    kept = urlencode(params.job_filter_fields(query))
    return reverse("dashboard:job-list") + (f"?{kept}" if kept else "")


def bulk_ask(query: QueryDict, action: str) -> BulkAsk:
    """The bulk action `query` asks for (GET or POST), every part checked: a bad one
    raises BulkInputError with a message that names it."""
    verb = VERBS.get(action)
    if verb is None:
        raise Http404(f"no bulk action {action[:40]!r}")
    scope = query.get("scope", "")
    if scope not in SCOPES:
        raise BulkInputError(ERR_SCOPE.format(choices=", ".join(SCOPES)))
    filters, errors = params.job_filters(query)
    if errors:
        raise BulkInputError(" ".join(errors))
    fields = [("scope", scope), *params.job_filter_fields(query)]
    if scope == "selected":
        try:
            ids = params.wholes(query, "ids", most=MAX_PAGE_SIZE)
        except params.BadQuery as exc:
            raise BulkInputError(str(exc)) from exc
        if not ids:
            raise BulkInputError(ERR_NONE_TICKED)
        chosen: dict[str, Any] = {"ids": ids}
        fields += [("ids", str(i)) for i in ids]
    else:
        chosen = service_filter(filters)
    return BulkAsk(verb, action, scope, chosen, fields, back_url(query))


def service_filter(filters: JobFilters) -> dict[str, Any]:
    """The list's filters as the bulk service's filter: the same jobs, or BulkInputError
    when a filter has no exact counterpart there (task, member, text) or none is set."""
    unsupported = [name for name in NOT_BULK_FILTERS if getattr(filters, name)]
    if unsupported:
        raise BulkInputError(ERR_NOT_BULK_FILTER.format(names=", ".join(unsupported)))
    chosen = {
        BULK_FILTERS[name]: value
        for name in BULK_FILTERS
        if (value := getattr(filters, name)) is not None
    }
    if not chosen:
        raise BulkInputError(ERR_NO_FILTER)
    if filters.run_at_from and filters.run_at_to and filters.run_at_from >= filters.run_at_to:
        raise BulkInputError(ERR_RANGE)
    return chosen


def _run(request: HttpRequest, ask: BulkAsk, *, dry_run: bool, after: int | None) -> BulkResult:
    return job_bulk_action_audited(
        user=request.user,
        via=OperatorAction.Via.DASHBOARD,
        action=ask.verb.service,
        filter=ask.filter,
        dry_run=dry_run,
        after=after,
        time_budget=BULK_SECONDS,
    )


@login_required
@operator_required
@require_http_methods(["GET", "POST"])
def job_bulk(request: HttpRequest, action: str) -> HttpResponse:
    """GET: how many jobs match, and the form that acts on them; POST: act (see the
    module's docstring)."""
    query = request.POST if request.method == "POST" else request.GET
    try:
        ask = bulk_ask(query, action)
        if request.method == "GET":
            return _confirm(request, ask)
        return _act(request, ask, query)
    except (BulkInputError, JobInputError) as exc:
        context = {"error": str(exc), "back_url": back_url(query)}
        return render(request, "tempo/dashboard/bulk_confirm.html", context, status=400)


def _confirm(request: HttpRequest, ask: BulkAsk) -> HttpResponse:
    count = _run(request, ask, dry_run=True, after=None)
    context = {
        "ask": ask,
        "count": count,
        "left": count.matched - count.changed,
        "question": _question(ask, count),
    }
    return render(request, "tempo/dashboard/bulk_confirm.html", context)


def _question(ask: BulkAsk, count: BulkResult) -> str:
    """'12 jobs match; retry them?' (or '3 ticked jobs ...', 'At least ...')."""
    jobs = f"{num(count.matched)} job{'s' if count.matched != 1 else ''}"
    if ask.scope == "selected":
        what = f"{num(count.matched)} ticked job{'s' if count.matched != 1 else ''} found"
    elif count.complete:
        what = f"{jobs} {'match' if count.matched != 1 else 'matches'}"
    else:
        what = f"At least {jobs} match (counted for {BULK_SECONDS:.0f} s)"
    return f"{what}; {ask.verb.question}"


def _act(request: HttpRequest, ask: BulkAsk, query: QueryDict) -> HttpResponse:
    try:
        after = params.whole(query, "after")
        matched_before = params.whole(query, "matched_before", low=0) or 0
        changed_before = params.whole(query, "changed_before", low=0) or 0
    except params.BadQuery as exc:
        raise BulkInputError(str(exc)) from exc
    result = _run(request, ask, dry_run=False, after=after)
    matched, changed = matched_before + result.matched, changed_before + result.changed
    if result.complete:
        messages.success(request, _done(ask, matched, changed))
        return redirect(ask.back_url)
    context = {
        "ask": ask,
        "progress": {
            "matched": matched,
            "changed": changed,
            "next_after": result.next_after,
            "seconds": BULK_SECONDS,
        },
    }
    return render(request, "tempo/dashboard/bulk_confirm.html", context)


def _done(ask: BulkAsk, matched: int, changed: int) -> str:
    """'Retry: 3 of 4 matching jobs scheduled again, to run now; 1 was left as it was.'"""
    which = "ticked" if ask.scope == "selected" else "matching"
    text = f"{ask.verb.button}: {num(changed)} of {num(matched)} {which} jobs {ask.verb.done}"
    left = matched - changed
    if left:
        text += f"; {num(left)} {'was' if left == 1 else 'were'} in a state it leaves alone"
    return text + "."
