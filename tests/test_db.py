"""The engine's database sessions: prepared per-job statements."""

import pytest
from django.db import connection

from tasksapp.executor import execute_batch
from tasksapp.models import Job, JobState
from tasksapp.services.transitions import job_claim_due
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
    settings.TEMPO = {**settings.TEMPO, "PREPARED_STATEMENTS": False}
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    claim_and_run_one()
    assert prepared_statements() == []
