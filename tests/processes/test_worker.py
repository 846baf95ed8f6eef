"""The Celery worker's side, with real processes."""

import pytest

from tests.processes.support import insert_jobs, outcome, wait_for

pytestmark = pytest.mark.processes


def test_a_busy_worker_takes_its_next_message_as_soon_as_a_job_ends(cluster, sql):
    """One slot, a queue of messages: each job starts right after the previous one ends
    (the freed prefetch slot wakes the worker's event loop; nothing polls for it)."""
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=1)
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
        timeout=20,
        message="worker ready",
    )
    insert_jobs(sql, count=6, start=3, spread=0.6, handler="tests.handlers.recording.record_slowly")
    wait_for(lambda: outcome(sql).get("succeeded") == 6, timeout=30, message="6 jobs done")
    gaps = [
        row[0]
        for row in sql.execute("""
            SELECT extract(epoch FROM started_at - lag(finished_at) OVER (ORDER BY started_at))
            FROM tasksapp_job ORDER BY started_at""").fetchall()[1:]
    ]
    assert len(gaps) == 5
    # Each 0.5 s job queues behind the previous one. Woken by the freed slot, the next
    # starts within milliseconds (bench.lag measures how many); waiting for a 1 s poll
    # instead, five gaps would not all stay under half a second.
    assert max(gaps) < 0.5, gaps


def test_a_handler_that_exits_fails_its_attempt_and_the_worker_goes_on(cluster, sql):
    """`sys.exit` inside a handler used to escape the wrapper: the Celery task stayed
    active and later jobs stayed claimed until the worker restarted."""
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=1)
    insert_jobs(sql, count=1, start=1, spread=0.1, handler="tests.handlers.recording.exit_now")
    insert_jobs(sql, count=3, start=2, spread=0.3, handler="tests.handlers.recording.record")
    wait_for(lambda: outcome(sql).get("succeeded") == 3, timeout=30, message="later jobs succeeded")
    # Each attempt fails and the next is due 0.5-2 s later: wait for the last one (a look
    # in between may find a retry running).
    wait_for(lambda: outcome(sql).get("dead") == 1, timeout=30, message="exiting job dead")
    attempts, errors = sql.execute(
        "SELECT attempts, errors FROM tasksapp_job WHERE handler LIKE '%exit_now'"
    ).fetchone()
    assert attempts == 5
    assert [e["error"].split("\n")[0] for e in errors] == ["SystemExit: 3"] * 5
    assert cluster.processes["w1"].poll() is None  # the worker process is still serving
