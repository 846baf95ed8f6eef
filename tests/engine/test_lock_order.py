"""A worker's multi-row updates of the same jobs wait for each other, never deadlock: a
group's successes and the lease keeper's renewal, on connections of their own, each
given its jobs in a different order, both stuck behind a third session's lock on one
job in the middle. Both lock their rows in id order, so once that lock goes, one
finishes and then the other; in their given orders each would hold what the other
waits for (PostgreSQL would end one with "deadlock detected")."""

import threading
import time

import psycopg
import pytest
from django.db import connection

from tasksapp.engine.store import PostgresJobStore
from tasksapp.engine.transitions import job_claim_due, job_start
from tests.engine.test_statement_plans import INSERT_FINISHED
from tests.factories import JobFactory
from tests.processes.conftest import database_url

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's row locks"),
]


def running_jobs(count: int) -> list[tuple[int, int]]:
    """(id, token) of `count` running jobs, among thousands of finished ones: a table on
    which each statement probes its jobs through the primary key, one by one."""
    with connection.cursor() as cursor:
        cursor.execute(INSERT_FINISHED, [3000])
        cursor.execute("ANALYZE tasksapp_job")
    jobs = [JobFactory() for _ in range(count)]
    claims = job_claim_due(ids=[job.id for job in jobs], owner="d1", ttl=30)
    started = job_start(claims=[(c.id, c.token) for c in claims], worker="w1", ttl=30)
    return sorted((job.id, job.token) for job in started)


def waiting_for_a_lock(dsn: str, count: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        waiting = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ).fetchone()[0]
    return waiting >= count


def test_successes_and_a_renewal_over_the_same_jobs_wait_instead_of_deadlocking():
    leases = running_jobs(9)
    middle = leases[4][0]
    dsn = database_url()
    store, errors, done = PostgresJobStore(), [], []

    def succeed() -> None:  # ascending, as a group's members were run
        try:
            outcomes = [(job_id, token, None, None) for job_id, token in leases]
            done.append(("succeeded", store.succeed(outcomes=outcomes)))
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)
        finally:
            connection.close()

    def renew() -> None:  # descending, as the keeper's held jobs may come
        try:
            done.append(("renewed", store.renew(leases=leases[::-1], ttl=30)))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    with psycopg.connect(dsn) as blocker:
        blocker.execute("SELECT id FROM tasksapp_job WHERE id = %s FOR UPDATE", [middle])
        threads = [threading.Thread(target=succeed), threading.Thread(target=renew)]
        for thread in threads:
            thread.start()
            time.sleep(0.3)  # the first is stuck behind the blocker before the second goes
        deadline = time.monotonic() + 10
        while not waiting_for_a_lock(dsn, 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        blocker.rollback()  # the middle job's lock goes
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sorted(name for name, _ in done) == ["renewed", "succeeded"]
    succeeded = dict(done)["succeeded"]
    assert succeeded == {job_id for job_id, _ in leases}  # all recorded, once
