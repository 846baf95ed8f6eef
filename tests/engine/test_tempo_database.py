"""TEMPO_DATABASE: the alias module, the router, the start-up checks and the audience
refused across databases; under the suite's one database (tests/tempo_database runs
Tempo on a second one)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections, router, transaction
from django.test import override_settings
from django_celery_beat.models import PeriodicTask

from tasksapp.engine.checks import check_configuration, tempo_database_errors
from tasksapp.engine.db import atomic_on, tempo_alias, tempo_atomic, tempo_connection
from tasksapp.engine.models import Job
from tasksapp.recurring.audiences import AudienceDatabaseError, validated_audience
from tasksapp.recurring.models import Member
from tasksapp.recurring.services import PlanningInputError, recurring_task_create
from tasksapp.routers import TempoRouter
from tasksapp.web.models import ApiToken, OperatorAction

ROUTER = ["tasksapp.routers.TempoRouter"]
HANDLER = "tests.handlers.recording.record"


def with_alias(name: str, *, routed: bool):
    from django.conf import settings

    databases = {**settings.DATABASES, name: settings.DATABASES["default"]}
    return override_settings(
        TEMPO_DATABASE=name, DATABASES=databases, DATABASE_ROUTERS=ROUTER if routed else []
    )


def test_by_default_everything_is_on_the_default_database_and_the_router_stays_out():
    assert tempo_alias() == "default" and tempo_connection() is connections["default"]
    r = TempoRouter()
    assert r.db_for_write(Job) is None and r.allow_migrate("default", "tasksapp", "job") is None
    assert tempo_database_errors() == []


@pytest.mark.django_db(transaction=True)
def test_tempo_atomic_opens_a_transaction_on_the_alias_read_when_entered():
    @tempo_atomic
    def inside():
        return tempo_connection().in_atomic_block

    assert inside() and not connection.in_atomic_block
    with atomic_on("default", "default"):  # one alias named twice: one transaction
        assert connection.in_atomic_block and len(connection.savepoint_ids) == 0


def test_the_router_places_tempos_models_and_leaves_the_users_with_the_project():
    r = TempoRouter()
    with override_settings(TEMPO_DATABASE="tempo"):
        assert r.db_for_read(Job) == r.db_for_write(Member) == "tempo"
        assert r.db_for_write(PeriodicTask) == "tempo"
        assert r.db_for_write(OperatorAction) == r.db_for_read(ApiToken) == "default"
        assert r.db_for_write(get_user_model()) is None
        assert r.allow_migrate("tempo", "tasksapp", "job") is True
        assert r.allow_migrate("default", "tasksapp", "job") is False
        assert r.allow_migrate("default", "tasksapp", "operatoraction") is True
        assert r.allow_migrate("tempo", "tasksapp", "apitoken") is False
        assert r.allow_migrate("tempo", "tasksapp") is True  # RunPython, RunSQL: Tempo's
        assert r.allow_migrate("tempo", "django_celery_beat", "periodictask") is True
        assert r.allow_migrate("tempo", "contenttypes", "contenttype") is True
        assert r.allow_migrate("tempo", "auth", "user") is False
        assert r.allow_migrate("default", "auth", "user") is None


def test_an_alias_not_in_databases_is_an_error():
    with override_settings(TEMPO_DATABASE="nowhere"):
        (error,) = tempo_database_errors()
        assert "tempo.E020" in {found.id for found in check_configuration()}  # at start-up
    assert error.id == "tempo.E020" and "'nowhere'" in error.msg and "default" in error.msg


def test_a_separate_alias_without_the_router_is_an_error_naming_it():
    with with_alias("tempo", routed=False):
        (error,) = tempo_database_errors()
    assert error.id == "tempo.E021" and "tasksapp.routers.TempoRouter" in error.hint
    with with_alias("tempo", routed=True):
        assert router.db_for_write(Job) == "tempo"
        assert tempo_database_errors() == []


@pytest.mark.django_db
def test_an_audience_read_from_another_database_than_tempos_is_refused():
    assert validated_audience("auth.User", {"is_active": True}) == (
        "auth.User",
        {"is_active": True},
    )
    with with_alias("tempo", routed=True):
        with pytest.raises(AudienceDatabaseError, match="'default'.*'tempo'"):
            validated_audience("auth.User", {})
        with pytest.raises(PlanningInputError, match="must be on Tempo's database"):
            recurring_task_create(
                name="users", handler=HANDLER, period=dt.timedelta(days=1), audience="auth.User"
            )


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_one_database_stays_in_the_callers_transaction():
    from tests.handlers.tasks_api import add

    with transaction.atomic():
        result = add.enqueue(1, 2)
        assert result.id and Job.objects.filter(id=int(result.id)).exists()
