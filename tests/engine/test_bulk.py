"""Bulk actions by filter (job_bulk_action) and batches of new jobs (job_schedule_many),
against the real database."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.services import (
    BatchJobError,
    JobInputError,
    batch,
    bulk,
    job_bulk_action,
    job_cancel,
    job_retry,
    job_run_now,
    job_schedule_many,
)
from tasksapp.engine.services.jobs import ERR_KEY_CONFLICT
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
HANDLER = "tests.handlers.recording.record"
SINGLE = {"retry": job_retry, "cancel": job_cancel, "run_now": job_run_now}
ALL_STATES = list(JobState.values)


def _later(**delta) -> dt.datetime:
    return timezone.now() + dt.timedelta(**(delta or {"hours": 1}))


def _job(state=JobState.SCHEDULED, **fields) -> Job:
    defaults = {"run_at": _later(), "attempts": 2, "max_attempts": 2}
    if state in (JobState.CLAIMED, JobState.RUNNING):
        defaults |= {"claimed_by": "w", "lease_expires_at": _later(minutes=1), "lease_token": 1}
    if state in (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED, JobState.LOST):
        defaults["finished_at"] = timezone.now()
    return JobFactory(state=state, **(defaults | fields))


def _view(job: Job) -> dict:
    """What an action may change, with the moments it sets read as set or not."""
    job.refresh_from_db()
    return {
        "state": job.state,
        "max_attempts": job.max_attempts,
        "claimed_by": job.claimed_by,
        "finished": job.finished_at is not None,
        "leased": job.lease_expires_at is not None,
        "cancel_requested": job.cancel_requested_at is not None,
        "due_now": job.run_at <= timezone.now(),
    }


# --- the same guards and changes as the single-job owners ---------------------------------


@pytest.mark.parametrize("action", sorted(SINGLE))
@pytest.mark.parametrize("state", ALL_STATES)
def test_each_job_ends_as_the_single_job_owner_leaves_it(action, state):
    one, many = _job(state), _job(state)
    try:
        SINGLE[action](job_id=one.id)
        refused = False
    except JobInputError:
        refused = True
    result = job_bulk_action(action=action, filter={"ids": [many.id]})
    assert _view(many) == _view(one)
    unchanged = refused or (action == "cancel" and state == JobState.CANCELLED)
    assert (result.matched, result.changed) == (1, 0 if unchanged else 1)


def test_a_cancelled_job_is_not_changed_again_and_a_cancel_request_is_not_renewed():
    cancelled = _job(JobState.CANCELLED)
    asked = _job(JobState.RUNNING, cancel_requested_at=timezone.now() - dt.timedelta(minutes=5))
    before = asked.cancel_requested_at
    result = job_bulk_action(action="cancel", filter={"ids": [cancelled.id, asked.id]})
    assert (result.matched, result.changed) == (2, 0)
    asked.refresh_from_db()
    assert asked.cancel_requested_at == before


def test_retry_by_state_changes_the_retryable_and_counts_the_rest_as_matched():
    jobs = {state: _job(state) for state in ALL_STATES}
    result = job_bulk_action(action="retry", filter={"state": ALL_STATES})
    assert (result.matched, result.changed, result.complete) == (len(ALL_STATES), 4, True)
    for state, job in jobs.items():
        job.refresh_from_db()
        retried = state in ("dead", "lost", "cancelled", "failed")
        assert job.state == ("scheduled" if retried else state)
        if retried:
            assert job.max_attempts == 3 and job.finished_at is None


def test_a_dry_run_counts_what_it_would_change_and_changes_nothing():
    jobs = [_job(JobState.DEAD), _job(JobState.DEAD), _job(JobState.SUCCEEDED)]
    before = [_view(job) for job in jobs]
    result = job_bulk_action(action="retry", filter={"handler_prefix": "tests."}, dry_run=True)
    assert (result.matched, result.changed, result.dry_run) == (3, 2, True)
    assert [_view(job) for job in jobs] == before
    cancel = job_bulk_action(action="cancel", filter={"state": "dead"}, dry_run=True)
    assert (cancel.matched, cancel.changed) == (2, 0)


# --- chunks, time budget, resuming ---------------------------------------------------------


def _dead_jobs(count: int) -> list[int]:
    now = timezone.now()
    rows = [
        Job(handler=HANDLER, run_at=now, state=JobState.DEAD, finished_at=now, attempts=5)
        for _ in range(count)
    ]
    return [job.id for job in Job.objects.bulk_create(rows)]


def _update_sizes(queries) -> list[int]:
    """The number of ids each UPDATE of the jobs table named."""
    updates = [q["sql"] for q in queries if q["sql"].startswith('UPDATE "tasksapp_job"')]
    ids = [sql.split('"tasksapp_job"."id" IN (', 1)[1].split(")", 1)[0] for sql in updates]
    return [text.count(",") + 1 for text in ids]


def test_a_large_match_is_changed_a_thousand_ids_per_statement():
    ids = _dead_jobs(2500)
    chunks = []
    with CaptureQueriesContext(connection) as queries:
        result = job_bulk_action(action="retry", filter={"state": "dead"}, on_chunk=chunks.append)
    assert (result.matched, result.changed) == (2500, 2500)
    assert _update_sizes(queries.captured_queries) == [1000, 1000, 500]
    assert [c.matched for c in chunks] == [1000, 2000, 2500]
    assert [c.next_after for c in chunks] == [ids[999], ids[1999], None]
    assert not Job.objects.filter(state=JobState.DEAD).exists()


def test_a_filter_by_ids_reads_them_chunk_by_chunk(monkeypatch):
    monkeypatch.setattr(bulk, "CHUNK_JOBS", 4)
    ids = _dead_jobs(10)
    other = _job(JobState.SCHEDULED).id
    wanted = [*ids, other, 10**12]  # a scheduled job and an id of no job are matched or not
    with CaptureQueriesContext(connection) as queries:
        result = job_bulk_action(action="retry", filter={"ids": wanted, "state": "dead"})
    assert (result.matched, result.changed) == (10, 10)
    assert _update_sizes(queries.captured_queries) == [4, 4, 2]
    assert Job.objects.get(id=other).state == JobState.SCHEDULED


def test_a_time_budget_stops_between_chunks_and_the_answer_resumes_it(monkeypatch):
    monkeypatch.setattr(bulk, "CHUNK_JOBS", 3)
    ids = _dead_jobs(7)
    first = job_bulk_action(action="retry", filter={"state": "dead"}, time_budget=1e-9)
    assert (first.matched, first.changed, first.next_after) == (3, 3, ids[2])
    assert not first.complete
    rest = job_bulk_action(
        action="retry", filter={"handler_prefix": "tests."}, after=first.next_after
    )
    assert (rest.matched, rest.changed, rest.complete) == (4, 4, True)
    assert Job.objects.filter(id__in=ids, state=JobState.SCHEDULED).count() == 7


# --- the filter ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("criterion", "matching", "other"),
    [
        ({"handler_prefix": "tests.handlers.rec"}, {}, {"handler": "tasksapp.demo.x"}),
        ({"handler_prefix": "tests_handlers"}, {"handler": "tests_handlers.x"}, {}),
        ({"queue": "mail"}, {"queue": "mail"}, {"queue": "mailbox"}),
        ({"priority": 7}, {"priority": 7}, {"priority": 6}),
        ({"error_contains": "timeout"}, {"last_error": "Read TIMEOUT on x"}, {"last_error": "x"}),
        ({"key_contains": "order:4"}, {"idempotency_key": "v1:order:42"}, {}),
        ({"run_at_from": "2030-01-01T00:00:00+00:00"}, {"run_at": "2030-01-01T00:00Z"}, {}),
        ({"run_at_to": "2030-01-01T00:00:00+00:00"}, {}, {"run_at": "2030-01-01T00:00Z"}),
        (
            {"finished_from": "2020-01-01T00:00:00Z", "finished_to": "2020-01-02T00:00:00Z"},
            {"finished_at": "2020-01-01T12:00Z"},
            {"finished_at": "2020-01-02T00:00Z"},
        ),
    ],
)
def test_each_criterion_picks_its_jobs(criterion, matching, other):
    parse = {
        k: dt.datetime.fromisoformat(v) if k.endswith("_at") else v for k, v in matching.items()
    }
    rest = {k: dt.datetime.fromisoformat(v) if k.endswith("_at") else v for k, v in other.items()}
    hit, miss = _job(JobState.DEAD, **parse), _job(JobState.DEAD, **rest)
    result = job_bulk_action(action="retry", filter=criterion)
    assert (result.matched, result.changed) == (1, 1)
    assert _view(hit)["state"] == "scheduled" and _view(miss)["state"] == "dead"


def test_created_range_takes_datetimes_too():
    job = _job(JobState.DEAD)
    job.refresh_from_db()
    moments = {"created_from": job.created_at, "created_to": job.created_at + dt.timedelta(1)}
    assert job_bulk_action(action="retry", filter=moments, dry_run=True).matched == 1


@pytest.mark.parametrize(
    ("action", "filter_", "message"),
    [
        (
            "delete",
            {"state": "dead"},
            bulk.ERR_ACTION.format(choices="retry, cancel, run_now", value="delete"),
        ),
        ("retry", {}, None),
        ("retry", ["dead"], None),
        ("retry", {"status": "dead"}, None),
        ("retry", {"ids": []}, bulk.ERR_IDS.format(max=bulk.MAX_IDS)),
        ("retry", {"ids": [1, "2"]}, bulk.ERR_IDS.format(max=bulk.MAX_IDS)),
        ("retry", {"ids": [2**63]}, bulk.ERR_IDS.format(max=bulk.MAX_IDS)),
        ("retry", {"state": "gone"}, None),
        ("retry", {"state": []}, None),
        ("retry", {"state": [{}]}, None),
        ("retry", {"priority": 10}, bulk.ERR_PRIORITY),
        ("retry", {"priority": True}, bulk.ERR_PRIORITY),
        ("retry", {"queue": ""}, bulk.ERR_TEXT.format(name="queue", max=bulk.MAX_TEXT_CHARS)),
        ("retry", {"error_contains": "a\x00"}, None),
        ("retry", {"run_at_from": "yesterday"}, None),
        ("retry", {"run_at_to": "2030-01-01T00:00:00"}, None),
    ],
)
def test_bad_input_is_refused_with_its_message_and_changes_nothing(action, filter_, message):
    job = _job(JobState.DEAD)
    with pytest.raises(JobInputError) as raised:
        job_bulk_action(action=action, filter=filter_)
    if message is not None:
        assert str(raised.value) == message
    assert _view(job)["state"] == "dead"


def test_the_refusals_name_what_to_fix():
    fields = ", ".join(sorted(bulk.FILTER_FIELDS))
    with pytest.raises(JobInputError) as empty:
        job_bulk_action(action="retry", filter={})
    assert str(empty.value) == bulk.ERR_FILTER_EMPTY.format(fields=fields)
    with pytest.raises(JobInputError) as unknown:
        job_bulk_action(action="retry", filter={"status": "dead", "when": 1})
    assert str(unknown.value) == bulk.ERR_FILTER_FIELDS.format(names="status, when", fields=fields)
    with pytest.raises(JobInputError) as naive:
        job_bulk_action(action="retry", filter={"run_at_to": "2030-01-01T00:00:00"})
    assert str(naive.value) == bulk.ERR_TIME.format(name="run_at_to", value="2030-01-01T00:00:00")
    with pytest.raises(JobInputError, match="^after must be"):
        job_bulk_action(action="retry", filter={"state": "dead"}, after="12")
    with pytest.raises(JobInputError, match="^time_budget must be"):
        job_bulk_action(action="retry", filter={"state": "dead"}, time_budget=0)


# --- batches of new jobs ---------------------------------------------------------------------


def _spec(n: int, **extra) -> dict:
    return {"handler": HANDLER, "run_at": _later(), "payload": {"n": n}, **extra}


def test_a_batch_is_stored_in_one_insert_in_its_order():
    with CaptureQueriesContext(connection) as queries:
        stored = job_schedule_many(jobs=[_spec(n, priority=n % 10) for n in range(300)])
    inserts = [q for q in queries.captured_queries if q["sql"].lstrip().startswith("INSERT")]
    assert len(inserts) == 1
    assert [job.payload["n"] for job, _ in stored] == list(range(300))
    assert all(created for _, created in stored)
    assert Job.objects.count() == 300
    job, _ = stored[7]
    job.refresh_from_db()
    assert (job.state, job.priority, job.payload) == ("scheduled", 7, {"n": 7})


def test_one_bad_job_stores_none_and_is_named_by_its_index():
    jobs = [_spec(0), _spec(1), _spec(2, max_attempts=0), _spec(3)]
    with pytest.raises(BatchJobError) as raised:
        job_schedule_many(jobs=jobs)
    assert raised.value.index == 2
    assert str(raised.value).startswith("jobs[2]: max_attempts")
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("text", batch.ERR_BATCH_ITEM_TYPE),
        ({"handler": HANDLER}, batch.ERR_BATCH_REQUIRED.format(name="run_at")),
        ({"run_at": "soon", "handler": HANDLER, "colour": 1}, None),
        ({"handler": "no.such.handler", "run_at": "x"}, None),
    ],
)
def test_each_kind_of_bad_job_is_refused_at_its_index(bad, message):
    with pytest.raises(BatchJobError) as raised:
        job_schedule_many(jobs=[_spec(0), bad])
    assert raised.value.index == 1 and str(raised.value).startswith("jobs[1]: ")
    if message is not None:
        assert raised.value.reason == message
    assert not Job.objects.exists()


def test_a_batch_must_be_a_list_of_one_to_the_limit():
    for jobs in ({"handler": HANDLER}, "jobs", None):
        with pytest.raises(JobInputError, match="^jobs must be a list"):
            job_schedule_many(jobs=jobs)
    with pytest.raises(JobInputError) as raised:
        job_schedule_many(jobs=[])
    assert str(raised.value) == batch.ERR_BATCH_SIZE.format(max=batch.MAX_BATCH_JOBS, count=0)
    with pytest.raises(JobInputError):
        job_schedule_many(jobs=[_spec(n) for n in range(batch.MAX_BATCH_JOBS + 1)])
    assert not Job.objects.exists()


def test_a_key_given_twice_in_one_batch_is_refused():
    with pytest.raises(BatchJobError) as raised:
        job_schedule_many(jobs=[_spec(0, idempotency_key="k"), _spec(0, idempotency_key="k")])
    assert raised.value.index == 1
    assert raised.value.reason == batch.ERR_BATCH_KEY.format(key="k", earlier=0)


def test_keys_stored_before_give_their_jobs_back_or_conflict_and_store_nothing():
    (first, _), (second, _) = job_schedule_many(
        jobs=[_spec(1, idempotency_key="a"), _spec(2, idempotency_key="b")]
    )
    again = job_schedule_many(jobs=[_spec(1, idempotency_key="a"), _spec(3, idempotency_key="c")])
    assert [(job.id, created) for job, created in again][0] == (first.id, False)
    assert again[1][1] is True
    with pytest.raises(BatchJobError) as raised:
        job_schedule_many(jobs=[_spec(4, idempotency_key="d"), _spec(9, idempotency_key="b")])
    assert (raised.value.index, raised.value.job_id) == (1, second.id)
    assert raised.value.reason == ERR_KEY_CONFLICT.format(
        key="b", job_id=second.id, fields="payload"
    )
    assert not Job.objects.filter(idempotency_key="d").exists()  # the insert was taken back
    assert Job.objects.count() == 3
