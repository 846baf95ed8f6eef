"""A job's search row (migration 0028): its idempotency key and payload as text, written
by triggers whatever inserts the job, once: a claim, a start and a success leave it as
it was; it follows the rare change of a key or a payload and goes with its job."""

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from tasksapp.engine.db import JOB_TABLE
from tasksapp.engine.models import Job, JobSearchText
from tasksapp.engine.store import job_store
from tasksapp.engine.store import postgres_sql as sql
from tasksapp.engine.store.rows import NewJob
from tests.factories import JobFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's search rows"),
]


def search_rows() -> dict[int, tuple[str, str]]:
    return {row.job_id: (row.idempotency_key, row.payload) for row in JobSearchText.objects.all()}


def versions(ids) -> dict[int, str]:
    """Each search row's xmin: the transaction that wrote its version."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, xmin::text FROM tasksapp_job_search WHERE job_id = ANY(%s)", [ids]
        )
        return dict(cursor.fetchall())


def new_job(key: str, payload) -> NewJob:
    return NewJob(
        handler="tests.handlers.recording.noop",
        run_at=timezone.now(),
        payload=payload,
        max_attempts=3,
        retry_policy={},
        delivery="at_least_once",
        time_limit=None,
        idempotency_key=key,
    )


def test_every_way_of_inserting_a_job_writes_its_row():
    orm = JobFactory(idempotency_key="orm-1", payload={"customer": "Ann"})
    bulk = Job.objects.bulk_create(
        [Job(handler="a.b", run_at=timezone.now(), idempotency_key=f"bulk-{i}") for i in range(3)]
    )
    stored = job_store().insert_jobs([new_job("store-1", {"n": 1}), new_job("store-2", [])])
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {JOB_TABLE} (handler, payload, run_at, state, attempts, max_attempts,"
            " retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error,"
            " errors) SELECT 'a.b', jsonb_build_object('i', i), now(), 'scheduled', 0, 5,"
            " '{}', 'transactional', 'set-' || i, 0, '', '', '[]'"
            " FROM generate_series(1, 4) AS i"
        )
    rows = search_rows()
    assert rows[orm.id] == ("orm-1", '{"customer": "Ann"}')
    assert [rows[job.id] for job in bulk] == [(f"bulk-{i}", "{}") for i in range(3)]
    assert [rows[job.id] for job in stored] == [("store-1", '{"n": 1}'), ("store-2", "[]")]
    assert len(rows) == Job.objects.count() == 10
    assert rows[Job.objects.get(idempotency_key="set-3").id] == ("set-3", '{"i": 3}')


def test_a_key_already_taken_writes_no_second_row():
    first = job_store().insert_jobs([new_job("once", {"v": 1})])
    again = job_store().insert_jobs([new_job("once", {"v": 2}), new_job("other", {})])
    assert [job.idempotency_key for job in again] == ["other"]
    assert search_rows() == {first[0].id: ("once", '{"v": 1}'), again[0].id: ("other", "{}")}


def test_a_claim_a_start_and_a_success_leave_the_row_as_it_was():
    ids = [JobFactory(idempotency_key=f"hot-{i}", run_at=timezone.now()).id for i in range(5)]
    before = versions(ids)
    with connection.cursor() as cursor:
        cursor.execute(sql.CLAIM_DUE, {"ids": ids, "owner": "d1", "ttl": 10, "lead": 0.04})
        leases = [(job_id, 1) for job_id in ids]  # the claim's token
        started = {**sql.fenced_params(leases), "worker": "w1", "ttl": 6, "lead": 1}
        cursor.execute(sql.START_CLAIMED, started)
        outcomes = sql.outcome_params([(job_id, 1, None, None) for job_id in ids], "w1")
        cursor.execute(sql.SUCCEED_RUNNING, outcomes)
    assert set(Job.objects.filter(id__in=ids).values_list("state", flat=True)) == {"succeeded"}
    assert versions(ids) == before


def test_a_changed_key_or_payload_rewrites_the_row_and_others_do_not():
    job = JobFactory(idempotency_key="k-1", payload={"a": 1})
    before = versions([job.id])
    Job.objects.filter(id=job.id).update(payload={"a": 1}, run_at=timezone.now())  # the same
    assert versions([job.id]) == before
    Job.objects.filter(id=job.id).update(payload={"b": 2})
    Job.objects.filter(id=job.id).update(idempotency_key="k-2")
    assert search_rows() == {job.id: ("k-2", '{"b": 2}')}


def test_deleted_and_truncated_jobs_take_their_rows_with_them():
    kept, *gone = [JobFactory(run_at=timezone.now() - dt.timedelta(days=i)) for i in range(4)]
    Job.objects.filter(id__in=[job.id for job in gone]).delete()
    assert list(search_rows()) == [kept.id]
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the delete's deferred key checks
        cursor.execute(f"TRUNCATE {JOB_TABLE} CASCADE")
    assert search_rows() == {}
