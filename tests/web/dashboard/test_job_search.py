"""Searching the job list, in the dashboard and the API alike: handler by prefix, queue,
priority, run-time range, and text in the last error, the idempotency key or the
payload: over all jobs through the trigram indexes (migration 0023), the jobs in flight
read apart; only a text without a trigram is searched in a bounded window."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tasksapp.engine.db import JOB_TABLE
from tasksapp.engine.models import Job, JobState
from tasksapp.web.selectors import jobs as selector
from tasksapp.web.selectors.jobs import (
    ERR_PRIORITY,
    ERR_TEXT,
    SEARCH_WINDOW,
    JobFilterError,
    JobFilters,
    job_page,
    text_indexed,
)
from tests.factories import JobFactory
from tests.web.test_read_plans import in_flight, index_scans, table  # noqa: F401 (a fixture)

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
    path = JobFactory(last_error="FileNotFoundError: C:\\temp\\out.csv", run_at=at(3))
    assert ids(JobFilters(text="\\temp\\")) == [path.id]
    assert ids(JobFilters(text="\\xtemp")) == []
    with pytest.raises(JobFilterError, match=ERR_TEXT):
        job_page(filters=JobFilters(text="x" * 201))


def test_a_match_behind_more_than_the_window_of_newer_jobs_is_found_on_the_first_page():
    old = JobFactory(last_error="SMTPDataError: mailbox full", run_at=at(90))
    newer = [
        Job(handler="tests.handlers.other", run_at=at(60) + dt.timedelta(milliseconds=i))
        for i in range(SEARCH_WINDOW + 1)
    ]
    Job.objects.bulk_create(newer, batch_size=2000)
    page = job_page(filters=JobFilters(text="mailbox full"))
    assert [job.id for job in page.jobs] == [old.id]
    assert page.next_cursor is None and page.searched_to is None


def test_matches_are_paged_by_keyset_in_the_list_order_with_other_filters():
    matches = [
        JobFactory(handler="billing.charge", payload={"customer": "cus_42"}, run_at=at(i))
        for i in range(1, 6)
    ]
    JobFactory(handler="mail.send", payload={"customer": "cus_42"}, run_at=at(3))
    JobFactory(handler="billing.charge", payload={"customer": "cus_7"}, run_at=at(2))
    filters = JobFilters(handler="billing", text="CUS_42")
    first = job_page(filters=filters, limit=3)
    assert [job.id for job in first.jobs] == [job.id for job in matches[:3]]
    second = job_page(filters=filters, limit=3, cursor=first.next_cursor)
    assert [job.id for job in second.jobs] == [job.id for job in matches[3:]]
    assert second.next_cursor is None and second.searched_to is None


def test_jobs_in_flight_are_found_in_their_place():
    running = JobFactory(state=JobState.RUNNING, payload={"order": "ord-77"}, run_at=at(1))
    done = JobFactory(state=JobState.SUCCEEDED, payload={"order": "ord-77"}, run_at=at(2))
    claimed = JobFactory(state=JobState.CLAIMED, idempotency_key="ord-77-a", run_at=at(3))
    failed = JobFactory(state=JobState.FAILED, last_error="ord-77: timeout", run_at=at(4))
    JobFactory(state=JobState.RUNNING, payload={"order": "ord-78"}, run_at=at(5))
    assert ids(JobFilters(text="ord-77")) == [running.id, done.id, claimed.id, failed.id]
    assert ids(JobFilters(text="ord-77", state=JobState.CLAIMED)) == [claimed.id]
    assert ids(JobFilters(text="ord-77", state=JobState.FAILED)) == [failed.id]


def test_only_a_text_without_a_trigram_is_searched_in_a_window():
    assert text_indexed("abc") and text_indexed("a-bcd") and text_indexed("ééé")
    assert not text_indexed("ab") and not text_indexed("a_b_c") and not text_indexed("%%%")


def test_a_text_without_a_trigram_is_searched_in_a_window_and_the_next_page_below_it(
    monkeypatch,
):
    monkeypatch.setattr(selector, "SEARCH_WINDOW", 5)
    recent = JobFactory(last_error="HTTP q!", run_at=at(1))
    fillers = [JobFactory(run_at=at(2 + i)) for i in range(6)]
    old = JobFactory(last_error="code q! again", run_at=at(30))
    first = job_page(filters=JobFilters(text="q!"))
    assert [job.id for job in first.jobs] == [recent.id]
    # The window: recent and four fillers; the search reached the fifth job's run time.
    assert first.searched_to == fillers[3].run_at and first.next_cursor
    second = job_page(filters=JobFilters(text="q!"), cursor=first.next_cursor)
    assert [job.id for job in second.jobs] == [old.id] and second.searched_to is None
    assert second.next_cursor is None
    # A text with a trigram, the same window size: no window.
    JobFactory(last_error="code zq4242", run_at=at(40))
    page = job_page(filters=JobFilters(text="zq4"))
    assert len(page.jobs) == 1 and page.searched_to is None


def test_a_windowed_text_with_other_filters_windows_only_the_jobs_they_match(monkeypatch):
    monkeypatch.setattr(selector, "SEARCH_WINDOW", 2)
    for i in range(5):
        JobFactory(handler="noise.x", run_at=at(i))
    old = JobFactory(handler="billing.charge", last_error="card q!", run_at=at(60))
    page = job_page(filters=JobFilters(handler="billing", text="q!"))
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


SEARCH_INDEXES = {"job_search_key_trgm_idx", "job_search_payload_trgm_idx"}
OTHER = "tests.handlers.other_"  # the handlers of most of the table's jobs
TEXT_FILTERS = [
    JobFilters(text="needle"),
    JobFilters(text="needle", handler="tests.handlers.other"),
    JobFilters(text="needle", state=JobState.SUCCEEDED),
]
TEXT_FILTER_IDS = ["text", "text and handler", "text and state"]


def needles() -> tuple[Job, Job]:
    """A finished job with the text in its error and one in flight with it in its payload."""
    needle = JobFactory(state=JobState.SUCCEEDED, handler=f"{OTHER}x", last_error="a needle")
    flying = JobFactory(state=JobState.RUNNING, handler=f"{OTHER}y", payload={"n": "needle"})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tasksapp_job_search")
    return needle, flying


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
@pytest.mark.parametrize("filters", TEXT_FILTERS, ids=TEXT_FILTER_IDS)
def test_a_text_search_reads_the_trigram_indexes_and_the_lease_index(table, filters):  # noqa: F811
    """On 20,000 jobs: the matching search rows through their two trigram indexes; then
    the jobs not in flight through the error's trigram index and the ids' primary key
    (the index's condition implied by the query's), those in flight through the lease
    index; a state filter reads the jobs' two indexes alone."""
    needle, flying = needles()
    with CaptureQueriesContext(connection) as queries:
        page = job_page(filters=filters, limit=5)
    wanted = [flying.id, needle.id] if filters.state is None else [needle.id]
    assert [job.id for job in page.jobs] == wanted
    searched = [q["sql"] for q in queries if 'FROM "tasksapp_job_search"' in q["sql"]]
    assert [set(index_scans(statement)) for statement in searched] == [SEARCH_INDEXES]
    statements = [q["sql"] for q in queries if f'FROM "{JOB_TABLE}"' in q["sql"]]
    reads = [set(map(in_flight, index_scans(statement))) for statement in statements]
    assert reads[0] == {"job_error_trgm_idx", "tasksapp_job_pkey"}
    assert reads[1:] == ([] if filters.state else [{"of jobs in flight"}])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
@pytest.mark.parametrize("filters", TEXT_FILTERS, ids=TEXT_FILTER_IDS)
def test_a_common_text_reads_the_run_time_order_and_each_jobs_search_row(
    table,  # noqa: F811
    filters,
    monkeypatch,
):
    """A text in more search rows than SEARCH_IDS: no list of ids; the same page, read in
    the run-time order, the search rows by an index (each job's by its primary key, or
    the matching ones hashed once: the planner's choice)."""
    monkeypatch.setattr(selector, "SEARCH_IDS", 0)
    needle, flying = needles()
    with CaptureQueriesContext(connection) as queries:
        page = job_page(filters=filters, limit=5)
    wanted = [flying.id, needle.id] if filters.state is None else [needle.id]
    assert [job.id for job in page.jobs] == wanted
    statements = [q["sql"] for q in queries if f'FROM "{JOB_TABLE}"' in q["sql"]]
    settled = set(index_scans(statements[0]))
    assert settled & {"job_run_at_id_idx", "job_handler_run_at_idx", "job_state_run_at_idx"}
    assert settled & (SEARCH_INDEXES | {"tasksapp_job_search_pkey"})


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


def test_the_dashboard_filters_by_prefix_and_text(viewer_client):
    wanted = JobFactory(handler="myjobs.a", last_error="boom", run_at=at(1))
    other = JobFactory(handler="myjobs.b", run_at=at(2))
    page = viewer_client.get(JOB_LIST, {"handler": "myjobs", "text": "BOOM"})
    body = page.content.decode()
    assert page.status_code == 200
    assert f"/jobs/{wanted.id}/" in body and f"/jobs/{other.id}/" not in body
    bad = viewer_client.get(JOB_LIST, {"priority": "12"})
    assert bad.status_code == 400
    assert "priority must be a whole number from 0 to 9." in bad.content.decode()


def test_the_list_speaks_of_a_window_only_for_a_text_without_a_trigram(viewer_client):
    JobFactory(last_error="KeyError: 'acct-42'")
    indexed = viewer_client.get("/jobs/", {"text": "acct-42"}).content.decode()
    short = viewer_client.get("/jobs/", {"text": "42"}).content.decode()
    assert "acct-42" in indexed and "is searched in the" not in indexed
    assert "A text without three letters or digits in a row is searched" in short
