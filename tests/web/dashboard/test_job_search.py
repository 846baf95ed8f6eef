"""Searching the job list, in the dashboard and the API alike: handler by prefix, queue,
priority, run-time range, and text in the last error, the idempotency key or the
payload, that text searched in a bounded window of the latest jobs."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tasksapp.engine.models import JobState
from tasksapp.engine.sql import JOB_TABLE
from tasksapp.web.selectors import jobs as selector
from tasksapp.web.selectors.jobs import (
    ERR_PRIORITY,
    ERR_TEXT,
    JobFilterError,
    JobFilters,
    job_page,
)
from tests.factories import JobFactory
from tests.web.test_read_plans import index_scans, table  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db
NOW = timezone.now
JOB_LIST = "/jobs/"


def ids(filters: JobFilters, **kwargs) -> list[int]:
    return [job.id for job in job_page(filters=filters, **kwargs).jobs]


def at(minutes: int) -> dt.datetime:
    return NOW() - dt.timedelta(minutes=minutes)


def test_the_handler_filter_is_a_prefix():
    charge = JobFactory(handler="myjobs.billing.charge", run_at=at(1))
    mail = JobFactory(handler="myjobs.mail.send", run_at=at(2))
    JobFactory(handler="otherjobs.myjobs.x", run_at=at(3))
    JobFactory(handler="myjob.single", run_at=at(4))
    assert ids(JobFilters(handler="myjobs")) == [charge.id, mail.id]
    assert ids(JobFilters(handler="myjobs.billing.charge")) == [charge.id]
    assert ids(JobFilters(handler="myjobs.billing.charge.more")) == []


def test_a_prefix_ending_in_the_last_character_still_matches():
    job = JobFactory(handler="a\U0010ffffb", run_at=at(1))
    assert ids(JobFilters(handler="a\U0010ffff")) == [job.id]


def test_queue_priority_and_time_range_filter_together():
    wanted = JobFactory(queue="mail", priority=8, run_at=at(10))
    JobFactory(queue="mail", priority=5, run_at=at(10))
    JobFactory(queue="default", priority=8, run_at=at(10))
    JobFactory(queue="mail", priority=8, run_at=at(100))
    filters = JobFilters(queue="mail", priority=8, run_at_from=at(60), run_at_to=at(0))
    assert ids(filters) == [wanted.id]
    with pytest.raises(JobFilterError, match=ERR_PRIORITY):
        job_page(filters=JobFilters(priority=10))


def test_text_is_found_in_the_last_error_the_key_and_the_payload_in_any_case():
    error = JobFactory(last_error="ConnectionRefused: smtp.example.org", run_at=at(1))
    key = JobFactory(idempotency_key="invoice-SMTP-42", run_at=at(2))
    payload = JobFactory(payload={"host": "Smtp.example.org", "n": 1}, run_at=at(3))
    JobFactory(payload={"host": "imap"}, run_at=at(4))
    assert ids(JobFilters(text="smtp")) == [error.id, key.id, payload.id]
    assert ids(JobFilters(text='"n": 1')) == [payload.id]  # the payload as JSON text


def test_text_wildcards_are_plain_characters():
    JobFactory(last_error="nothing to see", run_at=at(1))
    percent = JobFactory(last_error="disk 100% full", run_at=at(2))
    assert ids(JobFilters(text="%")) == [percent.id]
    assert ids(JobFilters(text="_")) == []
    with pytest.raises(JobFilterError, match=ERR_TEXT):
        job_page(filters=JobFilters(text="x" * 201))


def test_text_is_searched_in_a_window_and_the_next_page_goes_on_below_it(monkeypatch):
    monkeypatch.setattr(selector, "SEARCH_WINDOW", 5)
    recent = JobFactory(last_error="timeout", run_at=at(1))
    fillers = [JobFactory(run_at=at(2 + i)) for i in range(6)]
    old = JobFactory(last_error="Timeout again", run_at=at(30))
    first = job_page(filters=JobFilters(text="timeout"))
    assert [job.id for job in first.jobs] == [recent.id]
    # The window: recent and four fillers; the search reached the fifth job's run time.
    assert first.searched_to == fillers[3].run_at and first.next_cursor
    second = job_page(filters=JobFilters(text="timeout"), cursor=first.next_cursor)
    assert [job.id for job in second.jobs] == [old.id] and second.searched_to is None
    assert second.next_cursor is None


def test_text_with_other_filters_windows_only_the_jobs_they_match(monkeypatch):
    monkeypatch.setattr(selector, "SEARCH_WINDOW", 2)
    for i in range(5):
        JobFactory(handler="noise.x", run_at=at(i))
    old = JobFactory(handler="billing.charge", last_error="card declined", run_at=at(60))
    page = job_page(filters=JobFilters(handler="billing", text="declined"))
    assert [job.id for job in page.jobs] == [old.id] and page.next_cursor is None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
def test_a_rare_handler_prefix_reads_the_handler_index(table):  # noqa: F811
    """20 of 20,000 jobs: a range of job_handler_run_at_idx (a common prefix may rather
    read the run-time index backwards: its first rows come soon)."""
    JobFactory(handler="tests.handlers.recording.x", state=JobState.RUNNING)
    with CaptureQueriesContext(connection) as queries:
        page = job_page(filters=JobFilters(handler="tests.handlers.rec"), limit=5)
    assert len(page.jobs) == 5
    statements = [q["sql"] for q in queries if f'FROM "{JOB_TABLE}"' in q["sql"]]
    scans = {index for statement in statements for index in index_scans(statement)}
    assert "job_handler_run_at_idx" in scans


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
def test_a_text_search_reads_through_an_index_never_the_whole_table(table):  # noqa: F811
    with CaptureQueriesContext(connection) as queries:
        job_page(filters=JobFilters(text="needle"), limit=5)
    statements = [q["sql"] for q in queries if f'FROM "{JOB_TABLE}"' in q["sql"]]
    assert statements and all(index_scans(statement) for statement in statements)


# --- through the API and the dashboard -------------------------------------------------------


def test_the_api_filters_by_prefix_queue_priority_and_text(viewer_api):
    wanted = JobFactory(handler="myjobs.a", queue="mail", priority=7, payload={"to": "ann"})
    JobFactory(handler="myjobs.b", queue="mail", priority=7, payload={"to": "bob"})
    JobFactory(handler="other.a", queue="mail", priority=7, payload={"to": "ann"})
    answer = viewer_api.get(
        "/api/jobs/", {"handler": "myjobs", "queue": "mail", "priority": 7, "text": "ann"}
    )
    assert answer.status_code == 200, answer.content
    assert [row["id"] for row in answer.json()["results"]] == [wanted.id]
    bad = viewer_api.get("/api/jobs/", {"priority": 12})
    assert bad.status_code == 400 and "priority" in bad.json()


def test_the_dashboard_filters_by_prefix_and_text_and_says_the_search_is_bounded(viewer_client):
    wanted = JobFactory(handler="myjobs.a", last_error="boom", run_at=at(1))
    other = JobFactory(handler="myjobs.b", run_at=at(2))
    page = viewer_client.get(JOB_LIST, {"handler": "myjobs", "text": "BOOM"})
    body = page.content.decode()
    assert page.status_code == 200
    assert f"/jobs/{wanted.id}/" in body and f"/jobs/{other.id}/" not in body
    assert "Text is searched in the 10,000 latest jobs" in body
    bad = viewer_client.get(JOB_LIST, {"priority": "12"})
    assert bad.status_code == 400
    assert "priority must be a whole number from 0 to 9." in bad.content.decode()
