"""The indexes the dashboard reads by state, handler and run time leave out the jobs in
flight, so that a claim and a start write no entry in them; every read that needs those
jobs still finds them through an index (job_lease_idx), never by a scan of the table,
and the job list shows them in their place."""

import datetime as dt
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tasksapp.engine.db import JOB_TABLE
from tasksapp.engine.models import Job, JobState
from tasksapp.recurring import sql as recurring_sql
from tasksapp.web.selectors.dashboard import EXACT_COUNT_CAP, SQL_STATE_COUNTS, job_state_counts
from tasksapp.web.selectors.jobs import JobFilters, job_page
from tests.factories import JobFactory
from tests.test_migrations import index_conditions

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans"),
]

WITHOUT_JOBS_IN_FLIGHT = ("job_state_run_at_idx", "job_handler_run_at_idx", "job_run_at_id_idx")
# Migration 0023's text-search indexes: the jobs in flight left out too.
TRIGRAM_INDEXES = ("job_error_trgm_idx", "job_key_trgm_idx", "job_payload_trgm_idx")
# Partial indexes of the jobs in flight alone: either serves a read of those.
OF_JOBS_IN_FLIGHT = {"job_lease_idx", "job_active_queue_idx"}
HANDLER = "tests.handlers.recording.noop"
FILL = f"""
INSERT INTO {JOB_TABLE} (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT CASE WHEN i %% 1000 = 0 THEN %s ELSE 'tests.handlers.other_' || i %% 10 END, '{{}}',
    now() - i * interval '1 s', CASE WHEN i %% 1000 = 7 THEN 'dead' ELSE 'succeeded' END, 1, 5,
    '{{}}', 'at_least_once', md5(i::text), 0, '', '', '[]'
FROM generate_series(1, 20000) AS i
"""


@pytest.fixture
def table():
    """20,000 finished jobs, one a second back from now: one in a thousand of HANDLER, one
    in a thousand dead, the others succeeded; analysed.
    Jobs in flight and due ones are added by the tests."""
    with connection.cursor() as cursor:
        cursor.execute(FILL, [HANDLER])
        cursor.execute(f"ANALYZE {JOB_TABLE}")


def index_scans(statement: str, params=None) -> list[str]:
    """The indexes the statement's plan reads the jobs table through; fails on a scan of
    the table itself. Sequential scans are priced out, so a plan without one shows that an
    index can serve (a partial index whose condition the query does not imply cannot)."""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
            raw = cursor.fetchone()[0]
        finally:
            cursor.execute("RESET enable_seqscan")
    nodes, found = [(json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]], []
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if node.get("Relation Name") == JOB_TABLE:
            assert node["Node Type"] != "Seq Scan", statement
        if "Index Name" in node:  # an index scan, or a bitmap's reading of the index
            found.append(node["Index Name"])
    return found


def in_flight(index: str) -> str:
    return "of jobs in flight" if index in OF_JOBS_IN_FLIGHT else index


def test_the_three_indexes_leave_out_claimed_and_running_jobs():
    conditions = index_conditions(WITHOUT_JOBS_IN_FLIGHT)
    assert set(conditions) == set(WITHOUT_JOBS_IN_FLIGHT)
    for condition in conditions.values():
        assert condition.startswith("(NOT ") and "'claimed'" in condition
        assert "'running'" in condition and "'scheduled'" not in condition


def test_the_error_index_leaves_out_jobs_in_flight_and_the_search_rows_empty_payloads():
    """The last error's trigram index (migrations 0023, 0027): a claim and a start write
    no entry, nor does a job without an error; the payload's, on the search rows
    (migration 0028), leaves out the payloads without a trigram (`{}`)."""
    condition = index_conditions(["job_error_trgm_idx"])["job_error_trgm_idx"]
    assert "(NOT (" in condition and "'claimed'" in condition
    assert "'running'" in condition and "'scheduled'" not in condition
    assert "last_error <> ''" in condition
    searched = index_conditions(["job_search_payload_trgm_idx"])
    assert searched == {"job_search_payload_trgm_idx": "(payload <> '{}'::text)"}


def page_queries(filters: JobFilters) -> tuple[list, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        page = job_page(filters=filters, limit=5)
    listed = [q["sql"] for q in queries if f'FROM "{JOB_TABLE}"' in q["sql"]]
    return page.jobs, listed


@pytest.mark.parametrize(
    ("filters", "index"),
    [(JobFilters(), "job_run_at_id_idx"), (JobFilters(handler=HANDLER), "job_handler_run_at_idx")],
    ids=["all", "handler"],
)
def test_the_job_list_merges_the_jobs_in_flight_into_their_place(table, filters, index):
    now = timezone.now()
    running = JobFactory(handler=HANDLER, state=JobState.RUNNING, run_at=now)
    claimed = JobFactory(handler=HANDLER, state=JobState.CLAIMED, run_at=now)
    older = JobFactory(handler=HANDLER, state=JobState.CLAIMED, run_at=now - dt.timedelta(hours=9))
    due = JobFactory(handler=HANDLER, run_at=now - dt.timedelta(milliseconds=1))
    jobs, statements = page_queries(filters)
    assert [job.id for job in jobs[:3]] == [claimed.id, running.id, due.id]
    assert older.id not in [job.id for job in jobs]  # 9 h back: behind 4 finished jobs
    assert len(jobs) == 5 and jobs[3].state in (JobState.SUCCEEDED, JobState.DEAD)
    read = sorted(in_flight(i) for statement in statements for i in index_scans(statement))
    assert read == sorted([index, "of jobs in flight"])


def test_a_state_filter_reads_one_index_jobs_in_flight_the_lease_index(table):
    running = JobFactory(handler=HANDLER, state=JobState.RUNNING)
    jobs, [statement] = page_queries(JobFilters(state=JobState.RUNNING))
    assert [job.id for job in jobs] == [running.id]
    assert [in_flight(i) for i in index_scans(statement)] == ["of jobs in flight"]
    jobs, [statement] = page_queries(JobFilters(state=JobState.DEAD))
    assert len(jobs) == 5 and index_scans(statement) == ["job_state_run_at_idx"]


def test_state_counts_read_an_index_for_every_state(table):
    JobFactory.create_batch(2, state=JobState.RUNNING)
    JobFactory(state=JobState.CLAIMED)
    counts = {c.state: c.count for c in job_state_counts()}
    assert counts == {
        **dict.fromkeys(JobState.values, 0),
        JobState.SUCCEEDED: 19_980,
        JobState.DEAD: 20,
        JobState.RUNNING: 2,
        JobState.CLAIMED: 1,
    }
    scans = index_scans(SQL_STATE_COUNTS, {"cap": EXACT_COUNT_CAP})
    assert len(scans) == len(JobState.values)
    read = [in_flight(index) for index in scans]
    assert read.count("of jobs in flight") == 2
    # The other states: any index whose condition the state implies (no table scan). With
    # these empty payloads the payload's trigram index is near empty: it may be cheapest.
    allowed = {"of jobs in flight", "job_due_idx", *WITHOUT_JOBS_IN_FLIGHT, *TRIGRAM_INDEXES}
    assert set(read) <= allowed


def test_a_task_plan_counts_its_jobs_in_flight_through_the_lease_index(table):
    now = timezone.now()
    JobFactory(handler=HANDLER, state=JobState.RUNNING, run_at=now)
    params = {
        "handler": HANDLER,
        "start": now - dt.timedelta(hours=1),
        "end": now + dt.timedelta(hours=1),
        "width": 3600,
        "buckets": 2,
    }
    with connection.cursor() as cursor:
        cursor.execute(recurring_sql.JOB_LOAD, params)
        load = dict(cursor.fetchall())
    finished = Job.objects.filter(
        handler=HANDLER, run_at__gte=params["start"], run_at__lt=now, state=JobState.SUCCEEDED
    ).count()
    assert finished == 3 and load == {0: finished, 1: 1}
    read = sorted(in_flight(i) for i in index_scans(recurring_sql.JOB_LOAD, params))
    assert read == ["job_handler_run_at_idx", "of jobs in flight"]
