"""Bulk actions on the dashboard's job list: the confirmation counts and changes nothing;
its POST (CSRF, operator) acts through the chunked, audited service, goes on from where
a request stopped, and comes back to the list with its filters and the counts."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.services import bulk as engine_bulk
from tasksapp.web.dashboard import bulk
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER, make_job

pytestmark = pytest.mark.django_db
OTHER = "tests.handlers.recording.noop"


def url(action: str = "retry") -> str:
    return reverse("dashboard:job-bulk", args=[action])


def dead(count: int, handler: str = HANDLER) -> list[int]:
    now = timezone.now()
    return [
        make_job(JobState.DEAD, handler=handler, attempts=3, max_attempts=3, finished_at=now).id
        for _ in range(count)
    ]


def states(ids) -> list[str]:
    return list(Job.objects.filter(id__in=ids).order_by("id").values_list("state", flat=True))


def test_the_list_offers_both_paths_to_operators_only(operator_client, viewer_client):
    ids = dead(2)
    page = operator_client.get(reverse("dashboard:job-list"), {"state": "dead"}).content.decode()
    assert f'name="ids" value="{ids[0]}" form="bulk-selected"' in page
    assert 'id="bulk-filter-retry"' in page and f'formaction="{url("run-now")}"' in page
    assert '<input type="hidden" name="state" value="dead">' in page
    viewed = viewer_client.get(reverse("dashboard:job-list"), {"state": "dead"}).content.decode()
    assert "bulk-selected" not in viewed and 'name="ids"' not in viewed


def test_the_list_says_why_a_filter_cannot_choose_a_bulk_action(operator_client):
    dead(1)
    make_job(payload={"order": "x42"})
    page = operator_client.get(reverse("dashboard:job-list")).content.decode()
    assert bulk.ERR_NO_FILTER in page and 'id="bulk-filter-retry"' not in page
    page = operator_client.get(reverse("dashboard:job-list"), {"text": "x42"}).content.decode()
    assert 'id="bulk-selected-retry"' in page  # the ticked rows still can
    assert bulk.ERR_NOT_BULK_FILTER.format(names="text") in page


def test_the_confirmation_counts_and_changes_nothing(operator_client):
    ids = dead(3)
    scheduled = make_job().id  # matches the handler, not the state
    response = operator_client.get(url(), {"scope": "filter", "state": "dead", "handler": "tests."})
    body = response.content.decode()
    assert response.status_code == 200
    assert "3 jobs match; retry them?" in body
    assert "3 of them can be retried" in body and "csrfmiddlewaretoken" in body
    assert "Yes, retry 3 jobs" in body
    assert states(ids) == ["dead"] * 3 and states([scheduled]) == ["scheduled"]
    assert not OperatorAction.objects.exists()


def test_the_confirmation_says_how_many_the_action_would_leave_alone(operator_client):
    dead(2)
    make_job()
    body = operator_client.get(url(), {"scope": "filter", "handler": "tests."}).content.decode()
    assert "3 jobs match; retry them?" in body
    assert "2 of them can be retried" in body and "the other 1 is left as it is" in body


def test_retry_every_match_with_csrf_then_back_to_the_filtered_list(operator, operator_client):
    ids = dead(3)
    other = dead(2, handler=OTHER)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    form = strict.get(
        url(), {"scope": "filter", "state": "dead", "handler": "tests.handlers.recording.rec"}
    )
    fields = {"scope": "filter", "state": "dead", "handler": "tests.handlers.recording.rec"}
    assert strict.post(url(), fields).status_code == 403  # no CSRF token: refused
    assert states(ids) == ["dead"] * 3
    token = str(form.context["csrf_token"])
    done = strict.post(url(), fields | {"csrfmiddlewaretoken": token}, follow=True)
    back, _ = done.redirect_chain[-1]
    assert (
        back == reverse("dashboard:job-list") + "?state=dead&handler=tests.handlers.recording.rec"
    )
    page = done.content.decode()
    assert "Retry: 3 of 3 matching jobs scheduled again, to run now." in page
    assert states(ids) == ["scheduled"] * 3 and states(other) == ["dead"] * 2
    (row,) = OperatorAction.objects.all()
    assert (row.action, row.via, row.username, row.target_type, row.target_id) == (
        "bulk_retry",
        "dashboard",
        "otto",
        "jobs",
        "filter",
    )
    assert row.details == {
        "filter": {"state": "dead", "handler_prefix": "tests.handlers.recording.rec"},
        "matched": 3,
        "changed": 3,
        "complete": True,
        "next_after": None,
    }


def test_the_filter_path_takes_the_run_time_range_and_run_now(operator_client):
    now = timezone.now()
    soon = [make_job(run_at=now + dt.timedelta(hours=h)).id for h in (1, 2)]
    later = make_job(run_at=now + dt.timedelta(days=3)).id
    fields = {
        "scope": "filter",
        "state": "scheduled",
        "run_at_from": now.strftime("%Y-%m-%dT%H:%M"),
        "run_at_to": (now + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"),
    }
    body = operator_client.get(url("run-now"), fields).content.decode()
    assert "2 jobs match; run them now?" in body
    done = operator_client.post(url("run-now"), fields, follow=True).content.decode()
    assert "Run now: 2 of 2 matching jobs made due now." in done
    assert all(j.run_at <= timezone.now() for j in Job.objects.filter(id__in=soon))
    assert Job.objects.get(id=later).run_at > now + dt.timedelta(days=2)


def test_the_ticked_rows_are_cancelled_and_no_others(operator_client):
    waiting = [make_job().id for _ in range(4)]
    ticked = waiting[:2]
    query = {"scope": "selected", "state": "scheduled", "ids": ticked}
    body = operator_client.get(url("cancel"), query).content.decode()
    assert "2 ticked jobs found; cancel them?" in body
    assert states(waiting) == ["scheduled"] * 4
    done = operator_client.post(url("cancel"), query, follow=True)
    assert done.redirect_chain[-1][0] == reverse("dashboard:job-list") + "?state=scheduled"
    assert "Cancel: 2 of 2 ticked jobs cancelled" in done.content.decode()
    assert states(waiting) == ["cancelled", "cancelled", "scheduled", "scheduled"]
    (row,) = OperatorAction.objects.all()
    assert row.action == "bulk_cancel" and row.details["filter"] == {"ids": sorted(ticked)}


def test_a_long_action_stops_says_how_far_and_goes_on(operator_client, monkeypatch):
    monkeypatch.setattr(engine_bulk, "CHUNK_JOBS", 2)
    monkeypatch.setattr(bulk, "BULK_SECONDS", 1e-9)  # each request: one chunk
    ids = dead(5)
    fields = {"scope": "filter", "state": "dead"}
    first = operator_client.post(url(), fields)
    body = first.content.decode()
    assert first.status_code == 200
    assert f"So far 2 of 2 matching jobs scheduled again, to run now, up to job {ids[1]}" in body
    assert f'name="after" value="{ids[1]}"' in body and ">Go on</button>" in body
    assert states(ids) == ["scheduled", "scheduled", "dead", "dead", "dead"]
    # Go on, as its form posts: from after, with the totals so far.
    going = fields | {"after": ids[1], "matched_before": 2, "changed_before": 2}
    second = operator_client.post(url(), going).content.decode()
    assert f"So far 4 of 4 matching jobs scheduled again, to run now, up to job {ids[3]}" in second
    going = fields | {"after": ids[3], "matched_before": 4, "changed_before": 4}
    last = operator_client.post(url(), going, follow=True).content.decode()
    assert "Retry: 5 of 5 matching jobs scheduled again, to run now." in last
    assert states(ids) == ["scheduled"] * 5
    rows = OperatorAction.objects.order_by("id")
    assert [r.details["changed"] for r in rows] == [2, 2, 1]  # one audit row a request
    assert [r.details["next_after"] for r in rows] == [ids[1], ids[3], None]


def test_going_on_never_acts_on_a_job_twice(operator_client, monkeypatch):
    """A job retried by the first request and failed again meanwhile is dead again: the
    next request starts after it and leaves it."""
    monkeypatch.setattr(engine_bulk, "CHUNK_JOBS", 2)
    monkeypatch.setattr(bulk, "BULK_SECONDS", 1e-9)
    ids = dead(3)
    fields = {"scope": "filter", "state": "dead"}
    operator_client.post(url(), fields)
    Job.objects.filter(id=ids[0]).update(state=JobState.DEAD)
    operator_client.post(url(), fields | {"after": ids[1]}, follow=True)
    assert states(ids) == ["dead", "scheduled", "scheduled"]


def test_a_viewer_is_refused_and_the_refusal_recorded(viewer_client):
    ids = dead(2)
    assert viewer_client.get(url(), {"scope": "filter", "state": "dead"}).status_code == 403
    assert not OperatorAction.objects.exists()  # a look is no attempt
    response = viewer_client.post(url(), {"scope": "filter", "state": "dead"})
    assert response.status_code == 403 and states(ids) == ["dead", "dead"]
    (refusal,) = OperatorAction.objects.all()
    assert (refusal.action, refusal.username) == ("denied:job-bulk", "vera")
    assert refusal.details["path"] == url() and refusal.details["method"] == "POST"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"state": "dead"}, bulk.ERR_SCOPE.format(choices="filter, selected")),
        ({"scope": "filter"}, bulk.ERR_NO_FILTER),
        ({"scope": "filter", "text": "boom"}, bulk.ERR_NOT_BULK_FILTER.format(names="text")),
        ({"scope": "filter", "state": "gone"}, "filter.state must be a state or a list"),
        ({"scope": "filter", "priority": "12"}, "priority must be a whole number from 0 to 9."),
        ({"scope": "filter", "run_at_from": "yesterday"}, "run_at_from: not a date and time"),
        (
            {"scope": "filter", "run_at_from": "2026-12-02", "run_at_to": "2026-12-01"},
            "run_at_from must be before run_at_to.",
        ),
        ({"scope": "selected"}, bulk.ERR_NONE_TICKED),
        ({"scope": "selected", "ids": ["1", "x"]}, "ids: at most 200 job ids"),
        ({"scope": "selected", "ids": [str(2**63)]}, "ids: at most 200 job ids"),
        ({"scope": "selected", "ids": [str(i) for i in range(1, 202)]}, "ids: at most 200"),
        ({"scope": "filter", "state": "dead", "after": "-1"}, "after must be a whole number"),
    ],
)
def test_bad_input_is_refused_with_a_message_and_changes_nothing(operator_client, fields, message):
    ids = dead(2)
    for method in ("get", "post"):
        if "after" in fields and method == "get":
            continue  # only a POST goes on
        response = getattr(operator_client, method)(url(), fields)
        body = response.content.decode()
        assert response.status_code == 400, body
        assert message in body and "Nothing was done" in body
    assert states(ids) == ["dead", "dead"] and not OperatorAction.objects.exists()


def test_an_unknown_action_is_not_found(operator_client):
    assert (
        operator_client.get(url("delete"), {"scope": "filter", "state": "dead"}).status_code == 404
    )
