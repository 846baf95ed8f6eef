"""The Celery worker's side, with real processes."""

import signal

import psycopg
import pytest
import redis

from tests.processes.support import effect_counts, insert_jobs, outcome, wait_for

pytestmark = pytest.mark.processes


def _dispatcher_and_one_slot(cluster, sql) -> None:
    """A dispatcher and a worker of one slot, the worker ready."""
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=1)
    wait_for(
        lambda: sql.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
        timeout=20,
        message="worker ready",
    )


def test_a_busy_worker_takes_its_next_message_as_soon_as_a_job_ends(cluster, sql):
    """One slot, a queue of messages: each job starts right after the previous one ends
    (the freed prefetch slot wakes the worker's event loop; nothing polls for it)."""
    _dispatcher_and_one_slot(cluster, sql)
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


def _one_slot_two_jobs(cluster, sql) -> tuple[int, int]:
    """A worker of one slot; two slow jobs 0.1 s apart: (the first, the second), the first
    running."""
    _dispatcher_and_one_slot(cluster, sql)
    insert_jobs(sql, count=2, start=2, spread=0.2, handler="tests.handlers.recording.record_slowly")
    first, second = (r[0] for r in sql.execute("SELECT id FROM tasksapp_job ORDER BY run_at"))
    wait_for(lambda: _state(sql, first) == "running", timeout=20, message="first job running")
    return first, second


def _state(sql, job_id: int) -> str:
    return sql.execute("SELECT state FROM tasksapp_job WHERE id = %s", [job_id]).fetchone()[0]


def _waiting_in_broker(broker_url: str, queue: str) -> int:
    client = redis.Redis.from_url(broker_url)
    try:
        return sum(client.llen(key) for key in client.scan_iter(f"{queue}*", _type="list"))
    finally:
        client.close()


def _hold_row(db_url: str, job_id: int) -> psycopg.Connection:
    """A session holding the job's row lock: its success statement waits for it."""
    holder = psycopg.connect(db_url)
    holder.execute("SELECT 1 FROM tasksapp_job WHERE id = %s FOR UPDATE", [job_id])
    return holder


def _message_taken_before_commit(cluster, sql, first: int, second: int) -> None:
    # The first handler returns 0.5 s after it began; its success then waits for the row
    # lock. The second job's message leaves the broker meanwhile (the slot was given back
    # when the handler returned), though the one slot cannot start it yet.
    wait_for(
        lambda: _state(sql, second) == "claimed"
        and _waiting_in_broker(cluster.broker_url, cluster.queue) == 0,
        timeout=3,
        message="the second job's message taken while the first commits",
    )
    assert _state(sql, first) == "running"
    assert _state(sql, second) == "claimed"  # one slot: not started before that commit


def test_a_slot_is_given_back_when_its_handler_returns_not_when_it_commits(cluster, sql, db_url):
    """One slot: the next message is read from the broker while the job before it still
    commits (so it is ready the moment the slot's thread is free), yet never started
    before that commit: one handler at a time, each job once."""
    first, second = _one_slot_two_jobs(cluster, sql)
    holder = _hold_row(db_url, first)
    try:
        _message_taken_before_commit(cluster, sql, first, second)
        released_at = sql.execute("SELECT clock_timestamp()").fetchone()[0]
    finally:
        holder.commit()
        holder.close()
    wait_for(lambda: outcome(sql).get("succeeded") == 2, timeout=20, message="both succeeded")
    began = sql.execute("SELECT started_at FROM tasksapp_job WHERE id = %s", [second]).fetchone()[0]
    assert began >= released_at  # the one slot ran the second only after the first's commit
    assert effect_counts(sql) == {first: 1, second: 1}


def test_a_worker_killed_with_a_message_taken_but_not_started_loses_no_job(cluster, sql, db_url):
    """The same moment, then SIGKILL: the first job (running) comes back through the dead
    worker's lease, the second (claimed, its message acknowledged and gone with the
    worker) through its claim's lease; another worker runs each once."""
    first, second = _one_slot_two_jobs(cluster, sql)
    holder = _hold_row(db_url, first)
    try:
        _message_taken_before_commit(cluster, sql, first, second)
        cluster.kill("w1", signal.SIGKILL)
        cluster.processes["w1"].wait(timeout=10)
    finally:
        holder.commit()
        holder.close()
    cluster.worker("w2", concurrency=1)
    wait_for(lambda: outcome(sql).get("succeeded") == 2, timeout=40, message="both succeeded")
    assert effect_counts(sql) == {first: 1, second: 1}
    attempts = dict(sql.execute("SELECT id, attempts FROM tasksapp_job").fetchall())
    # The first's run rolled back with its worker (transactional): run again, not counted.
    assert attempts == {first: 1, second: 1}
