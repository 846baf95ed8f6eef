"""Tempo on the database "tempo", the project's own tables on "default": where each row
goes, what a job's transaction covers, what the Tasks backend defers, and the dashboard
and API on both."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connections, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.services import job_schedule
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tasksapp.recurring.checks import check_audience_databases
from tasksapp.recurring.models import RecurringTask
from tasksapp.recurring.services import PlanningInputError, recurring_task_create
from tasksapp.web.models import ApiToken, OperatorAction
from tasksapp.web.operators import roles_ensure
from tasksapp.web.tokens import api_token_issue
from tests.handlers.tasks_api import add
from tests.tempo_database.handlers import effects_table

pytestmark = pytest.mark.django_db(databases=["default", "tempo"], transaction=True)
WRITE_BOTH = "tests.tempo_database.handlers.write_both"


def tables(alias: str) -> set[str]:
    return set(connections[alias].introspection.table_names())


def rows(alias: str, sql: str, params=()) -> list[tuple]:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def soon() -> dt.datetime:
    return timezone.now() - dt.timedelta(milliseconds=10)


def run(*jobs: Job) -> int:
    claims = job_claim_due(ids=[job.id for job in jobs], owner="d", ttl=10)
    return execute_batch([[c.id, c.token, c.run_at_ms] for c in claims])


def test_tempos_tables_are_on_its_database_and_the_users_with_the_project():
    tempo, default = tables("tempo"), tables("default")
    assert {"tasksapp_job", "tasksapp_member", "django_celery_beat_periodictask"} <= tempo
    assert not {"tasksapp_job", "tasksapp_member", "django_celery_beat_periodictask"} & default
    assert {"auth_user", "tasksapp_operatoraction", "tasksapp_apitoken"} <= default
    assert not {"auth_user", "tasksapp_operatoraction", "tasksapp_apitoken"} & tempo


def test_a_scheduled_job_is_written_on_tempos_database():
    job = job_schedule(handler=WRITE_BOTH, run_at=soon())
    assert job._state.db == "tempo"
    assert rows("tempo", "SELECT handler FROM tasksapp_job WHERE id = %s", [job.id]) == [
        (WRITE_BOTH,)
    ]
    assert Job.objects.using("tempo").count() == 1


def test_a_transactional_job_commits_tempos_writes_with_its_success_the_projects_apart():
    for alias in ("tempo", "default"):
        effects_table(alias)
    done = job_schedule(handler=WRITE_BOTH, run_at=soon())
    failed = job_schedule(handler=WRITE_BOTH, run_at=soon(), payload={"fail": True})
    run(done)
    run(failed)
    assert Job.objects.get(id=done.id).state == JobState.SUCCEEDED
    assert Job.objects.get(id=failed.id).state == JobState.FAILED
    effects = "SELECT job_id, in_transaction FROM test_split_effects ORDER BY id"
    # On Tempo's database the handler ran inside the job's transaction: the failed
    # attempt's write rolled back with it.
    assert rows("tempo", effects) == [(done.id, True)]
    # On the default database it ran outside it: the failed attempt's write stays (such
    # writes are at least once, docs/decisions/0022-tempo-database-alias.md).
    assert rows("default", effects) == [(done.id, False), (failed.id, False)]


def test_a_task_enqueued_in_a_rolled_back_transaction_is_never_stored():
    with pytest.raises(RuntimeError), transaction.atomic():
        result = add.enqueue(2, 2)
        assert result.id == ""  # stored at the commit, which never comes
        raise RuntimeError("roll back")
    assert Job.objects.count() == 0


def test_a_task_enqueued_in_a_transaction_is_stored_at_its_commit():
    with transaction.atomic():
        result = add.enqueue(3, 3)
        assert Job.objects.count() == 0
    job = Job.objects.get()
    assert result.id == str(job.id) and job.handler == add.module_path
    assert run(job) == 1
    assert add.get_result(result.id).return_value == 6


def test_a_task_enqueued_outside_a_transaction_is_stored_at_once():
    result = add.enqueue(4, 4)
    assert Job.objects.filter(id=int(result.id)).exists()


def test_an_audience_on_the_default_database_is_refused():
    with pytest.raises(PlanningInputError, match="must be on Tempo's database"):
        recurring_task_create(
            name="users", handler=WRITE_BOTH, period=dt.timedelta(days=1), audience="auth.User"
        )
    plain = recurring_task_create(name="plain", handler=WRITE_BOTH, period=dt.timedelta(days=1))
    assert plain._state.db == "tempo"


def test_the_check_names_a_stored_audience_on_another_database():
    RecurringTask.objects.create(
        name="old",
        handler=WRITE_BOTH,
        epoch=timezone.now(),
        period=dt.timedelta(days=1),
        slices=24,
        audience="auth.User",
    )
    (error,) = check_audience_databases(databases=["tempo"])
    assert error.id == "tempo.E022" and "'old'" in error.msg and "auth.User" in error.msg
    assert check_audience_databases(databases=["default"]) == []


@pytest.fixture
def operator():
    roles_ensure()  # the migration's are gone after a flush
    user = get_user_model().objects.create_user("op", password="pw-op-12345")
    user.groups.add(Group.objects.get(name="operator"))
    return user


def test_the_dashboard_answers_and_its_actions_are_audited(operator):
    client = Client()
    client.force_login(operator)
    job = job_schedule(handler=WRITE_BOTH, run_at=timezone.now() + dt.timedelta(hours=1))
    for name in ("dashboard:overview", "dashboard:job-list", "dashboard:tokens", "dashboard:audit"):
        assert client.get(reverse(name)).status_code == 200, name
    assert client.get(reverse("dashboard:job-detail", args=[job.id])).status_code == 200
    response = client.post(reverse("dashboard:job-action", args=[job.id, "cancel"]))
    assert response.status_code in (200, 302)
    assert Job.objects.get(id=job.id).state == JobState.CANCELLED
    action = OperatorAction.objects.get()
    assert action._state.db == "default" and action.user == operator
    assert (action.action, action.target_id) == ("cancel", str(job.id))


def test_the_api_answers_with_a_token_and_audits_its_writes(operator):
    token, key = api_token_issue(owner=operator, name="ci", trusted=True)
    assert ApiToken.objects.get()._state.db == "default"
    client = Client(HTTP_AUTHORIZATION=f"Token {key}")
    response = client.post(
        "/api/jobs/",
        {"handler": WRITE_BOTH, "run_at": (timezone.now() + dt.timedelta(hours=1)).isoformat()},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    assert Job.objects.using("tempo").filter(id=job_id).exists()
    assert client.get(f"/api/jobs/{job_id}/").json()["id"] == job_id
    assert client.get("/api/health/").status_code in (200, 503)  # no dispatcher runs here
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and b"tempo_jobs" in metrics.content
    assert client.post(f"/api/jobs/{job_id}/cancel/").status_code == 200
    assert OperatorAction.objects.filter(action="cancel", target_id=str(job_id), via="api").exists()
    refused = client.post(
        "/api/recurring-tasks/",
        {"name": "users", "handler": WRITE_BOTH, "period_seconds": 86400, "audience": "auth.User"},
        content_type="application/json",
    )
    assert refused.status_code == 400 and "Tempo's database" in refused.content.decode()
