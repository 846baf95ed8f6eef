"""The engine's database sessions: prepared per-job statements, lifetime, commits."""

import pytest
from django.db import close_old_connections, connection

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.sessions import use_engine_sessions
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def claim_and_run_one() -> None:
    job = JobFactory(handler="tests.handlers.recording.echo", delivery="at_least_once")
    (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)
    assert execute_batch([[claim.id, claim.token, claim.run_at_ms]]) == 1
    assert Job.objects.get(id=job.id).state == JobState.SUCCEEDED


def test_start_and_finish_are_prepared_once_per_session():
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    claim_and_run_one()
    claim_and_run_one()
    statements = prepared_statements()
    assert len(statements) == 2, statements  # re-used by the second job, not prepared again
    assert any("SET state = 'running'" in s for s in statements)
    assert any("SET state = 'succeeded'" in s for s in statements)


def test_prepared_statements_can_be_turned_off(settings):
    settings.TEMPO_TUNING = {"PREPARED_STATEMENTS": False}
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    claim_and_run_one()
    assert prepared_statements() == []


def test_engine_sessions_have_no_age_limit(settings):
    """Dispatchers and workers keep their sessions past CONN_MAX_AGE: replacing them costs
    a job its start, and all threads started together would reconnect at once."""
    assert connection.settings_dict["CONN_MAX_AGE"]  # the web processes' limit is set
    use_engine_sessions()
    connection.close()
    connection.ensure_connection()
    session = connection.connection
    assert connection.close_at is None
    close_old_connections()
    assert connection.connection is session
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "off"
