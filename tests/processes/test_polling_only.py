"""Polling only (TEMPO_DISPATCH_NOTIFY=false), with real processes: the dispatcher does not
LISTEN, learns of a job written after its first poll by polling ahead, and starts it on
time."""

import signal

import pytest

from tests.processes.support import insert_jobs, wait_for

pytestmark = pytest.mark.processes
POLL_S = 1.0  # TEMPO_NOTIFY_OFF_POLL_SECONDS here: a job written 2 s ahead is seen in time
ON_TIME_S = 0.3  # a job found only by a poll after its run time would be up to 1 s late


def test_without_notifications_a_job_written_ahead_is_found_by_polling_and_runs_on_time(
    cluster, sql
):
    cluster.env.update(TEMPO_DISPATCH_NOTIFY="false", TEMPO_NOTIFY_OFF_POLL_SECONDS=str(POLL_S))
    cluster.dispatcher("d1")
    cluster.worker("w1", concurrency=1)
    wait_for(
        lambda: min(
            sql.execute(
                "SELECT (SELECT count(*) FROM tasksapp_workerprocess),"
                " (SELECT COALESCE(sum(polls), 0) FROM tasksapp_dispatchercounter)"
            ).fetchone()
        )
        >= 1,
        timeout=30,
        interval=0.05,
        message="w1 ready and d1 polled",
    )
    (polls_before,) = sql.execute("SELECT sum(polls) FROM tasksapp_dispatchercounter").fetchone()
    insert_jobs(sql, count=1, start=2.0, spread=0.1)
    wait_for(
        lambda: sql.execute("SELECT state FROM tasksapp_job").fetchone()[0] == "succeeded",
        timeout=10,
        interval=0.05,
        message="the job succeeded",
    )
    (lag,) = sql.execute(
        "SELECT extract(epoch FROM started_at - run_at) FROM tasksapp_job"
    ).fetchone()
    cluster.kill("d1", signal.SIGTERM)  # a clean stop writes its last counters
    cluster.processes["d1"].wait(timeout=10)
    polls, notifications = sql.execute(
        "SELECT sum(polls), sum(notifications) FROM tasksapp_dispatchercounter"
    ).fetchone()
    assert 0 <= lag < ON_TIME_S
    assert polls > polls_before  # found by a poll made after it was written
    assert notifications == 0  # the insert's NOTIFY reached no dispatcher
