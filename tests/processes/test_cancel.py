"""Cancelling running jobs and snoozing, with real dispatcher and worker processes.

The cluster's run lease is 3 s, renewed every second: a worker learns of a cancel
request within about a second, and the handler stops at its next check.
"""

import time

import pytest

from tasksapp.engine.services import job_cancel
from tests.processes.inflight import (
    MODES,
    create_tables,
    effects,
    insert_blocking,
    jobs,
    starts,
    wait_for_state,
    wait_until_running,
)
from tests.processes.support import wait_for

pytestmark = pytest.mark.processes

UNTIL_CANCELLED = "tests.handlers.recording.record_until_cancelled"
SNOOZE = "tests.handlers.recording.snooze_then_record"
HANG = "tests.handlers.recording.loop_forever"
# From the cancel request to the job's end: the next renewal (≤ 1 s) and the handler's
# next check (0.05 s); the bound leaves room for a busy machine.
CANCEL_BOUND_S = 6.0


def with_handler(sql, ids: list[int], handler: str, **columns) -> None:
    sets = ", ".join(["handler = %(handler)s", *[f"{name} = %({name})s" for name in columns]])
    sql.execute(
        f"UPDATE tasksapp_job SET {sets} WHERE id = ANY(%(ids)s)",  # noqa: S608
        {"handler": handler, "ids": ids, **columns},
    )


@pytest.mark.parametrize("delivery", MODES)
def test_running_jobs_end_cancelled_in_every_delivery_mode(cluster, sql, delivery):
    create_tables(sql)
    ids = insert_blocking(sql, count=3, delivery=delivery, start=2.0, block=60)
    with_handler(sql, ids, UNTIL_CANCELLED)
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=4)
    wait_until_running(sql, ids)
    asked = time.monotonic()
    for job_id in ids:  # claimed: an at-least-once job whose start is still deferred
        assert job_cancel(job_id=job_id).state in ("claimed", "running")
    wait_for_state(sql, ids, "cancelled", timeout=CANCEL_BOUND_S)
    took = time.monotonic() - asked
    time.sleep(2.5)  # nothing runs it again: no retry, no reaper
    rows, done, began = jobs(sql, ids), effects(sql, ids), starts(sql, ids)
    for job_id in ids:
        assert (rows[job_id]["state"], rows[job_id]["attempts"]) == ("cancelled", 1)
        assert rows[job_id]["errors"] == []
        assert began[job_id] == [1]
        # a transactional handler's effect rolled back; the others had committed theirs
        expected = [] if delivery == "transactional" else [(1, rows[job_id]["key"])]
        assert done[job_id] == expected, (job_id, done[job_id])
    print(f"{delivery}: cancelled {took:.2f} s after the requests")


def test_a_handler_that_never_checks_ends_at_its_time_limit_then_cancelled(cluster, sql):
    """Prefork ends the hung child at its limit; the failed attempt's retry finds the
    cancel request at its start and ends the job cancelled without running it again."""
    create_tables(sql)
    (job_id,) = insert_blocking(sql, count=1, delivery="transactional", start=1.5)
    with_handler(sql, [job_id], HANG, time_limit=2.0)
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=1, pool="prefork")
    wait_for(
        lambda: sql.execute("SELECT state FROM tasksapp_job WHERE id = %s", [job_id]).fetchone()[0]
        == "running",
        timeout=30,
        message="job running",
    )
    job_cancel(job_id=job_id)
    wait_for_state(sql, [job_id], "cancelled", timeout=20)
    row = jobs(sql, [job_id])[job_id]
    assert row["attempts"] == 2  # the hung one, and the start that found the request
    assert [entry["kind"] for entry in row["errors"]] == ["time_limit"]


def test_a_worker_killed_after_a_cancel_request_leaves_the_job_cancelled(cluster, sql):
    create_tables(sql)
    ids = insert_blocking(sql, count=2, delivery="at_least_once", start=1.5, block=600)
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=2)
    wait_until_running(sql, ids)  # record_then_block: never checks
    cluster.kill("w1")
    for job_id in ids:
        job_cancel(job_id=job_id)
    wait_for_state(sql, ids, "cancelled", timeout=20)  # the reaper, at the lease's end
    assert starts(sql, ids) == {job_id: [1] for job_id in ids}


def test_a_snoozed_job_runs_again_later_without_using_attempts(cluster, sql):
    create_tables(sql)
    (job_id,) = insert_blocking(sql, count=1, delivery="transactional", start=1.5)
    sql.execute(
        "UPDATE tasksapp_job SET handler = %s, max_attempts = 1,"
        ' payload = \'{"snoozes": 2, "seconds": 1}\' WHERE id = %s',
        [SNOOZE, job_id],
    )
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=2)
    wait_for_state(sql, [job_id], "succeeded", timeout=30)
    state, attempts, history, result = sql.execute(
        "SELECT state, attempts, history, result FROM tasksapp_job WHERE id = %s", [job_id]
    ).fetchone()
    assert (state, attempts, result) == ("succeeded", 1, {"runs": 3, "attempt": 1})
    assert [(e["event"], e["attempt"], e["seconds"]) for e in history] == [
        ("snoozed", 1, 1.0),
        ("snoozed", 1, 1.0),
    ]
    began = [
        row[0]
        for row in sql.execute(
            "SELECT started_at FROM test_started WHERE job_id = %s ORDER BY id", [job_id]
        ).fetchall()
    ]
    gaps = [(b - a).total_seconds() for a, b in zip(began, began[1:], strict=False)]
    assert len(began) == 3 and all(gap >= 1.0 for gap in gaps), gaps
    # the snoozed runs' effects rolled back; only the last run's is kept
    assert [attempt for attempt, _ in effects(sql, [job_id])[job_id]] == [1]
