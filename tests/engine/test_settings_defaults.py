"""A project sets none of Tempo's settings and gets the defaults; a typo is an error."""

import pytest
from celery import Celery
from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured

from tasksapp.engine import checks
from tasksapp.engine.settings import (
    DEFAULTS,
    ERR_TUNING_KEYS,
    ERR_UNKNOWN_KEYS,
    PLANNING_DEFAULTS,
    RETENTION_DEFAULTS,
    TempoSettings,
    configured,
)
from tasksapp.engine.tuning import TUNING_DEFAULTS
from tasksapp.engine.worker.celery_app import _with_tempo, route_to_tempo_queue
from tasksapp.engine.worker.wakeup import HubWakeup, HubWakeupReader
from tasksapp.management.commands.tempo_worker import served_queues
from tasksapp.recurring.settings import PlanningSettings
from tasksapp.retention.settings import RetentionSettings


def test_without_any_setting_every_key_has_its_default(settings):
    del settings.TEMPO
    settings.CELERY_BROKER_URL = "redis://broker:6379/3"
    loaded = TempoSettings.load()
    assert loaded.queue == "tempo" and loaded.partitions == 16
    assert loaded.prepared_statements is True  # no pooler
    assert loaded.index_prefix == "tempo:"
    assert loaded.index_redis_url == "redis://broker:6379/3"


def test_a_project_sets_only_what_it_changes(settings):
    settings.TEMPO = {"QUEUE": "jobs", "DB_POOLER": "transaction"}
    loaded = TempoSettings.load()
    assert (loaded.queue, loaded.index_prefix, loaded.prepared_statements) == (
        "jobs",
        "jobs:",
        False,
    )
    assert loaded.lookahead_seconds == DEFAULTS["LOOKAHEAD_SECONDS"]
    assert loaded.max_batch == TUNING_DEFAULTS["MAX_BATCH"]  # a tuning, not a setting


def test_an_unknown_key_is_an_error_naming_it(settings):
    settings.TEMPO = {"QEUE": "jobs"}
    with pytest.raises(ImproperlyConfigured) as refused:
        TempoSettings.load()
    assert str(refused.value) == ERR_UNKNOWN_KEYS.format(
        setting="TEMPO", unknown="QEUE", known=", ".join(DEFAULTS)
    )
    assert [m.id for m in checks.check_configuration()] == ["tempo.E010"]


def test_a_tuning_set_as_a_setting_is_an_error_saying_it_is_no_setting(settings):
    """The engine's tunings were settings once: a project that still sets one is told
    what it is, and nothing is loaded."""
    settings.TEMPO = {"QUEUE": "jobs", "FANOUT": 8, "MAX_BATCH": 10}
    with pytest.raises(ImproperlyConfigured) as refused:
        TempoSettings.load()
    expected = ERR_TUNING_KEYS.format(setting="TEMPO", tunings="FANOUT, MAX_BATCH")
    assert str(refused.value) == expected
    assert not set(TUNING_DEFAULTS) & set(DEFAULTS)


def test_the_redis_mode_without_its_app_is_an_error_naming_the_app(settings, monkeypatch):
    """The Redis due index is an optional app: the engine knows only what registered."""
    from tasksapp.engine.dispatcher.sources import base

    settings.TEMPO = {"DISPATCH_MODE": "redis"}
    assert "redis" in base.DUE_SOURCES  # the standalone deployment installs the app
    assert checks.check_configuration() == []
    monkeypatch.setattr(base, "DUE_SOURCES", {})
    (found,) = checks.check_configuration()
    assert found.id == "tempo.E010" and "'tasksapp.contrib.redis_index' in INSTALLED_APPS" in (
        found.msg
    )
    with pytest.raises(ImproperlyConfigured, match="tasksapp.contrib.redis_index"):
        base.due_source_factory("redis")


def test_planning_and_retention_have_defaults_too(settings):
    del settings.TEMPO_PLANNING
    del settings.TEMPO_RETENTION
    assert configured("TEMPO_PLANNING") == PLANNING_DEFAULTS
    assert PlanningSettings.load().phase_strategy == "golden"
    assert RetentionSettings.load().audit_days == RETENTION_DEFAULTS["AUDIT_DAYS"]


def test_a_project_without_login_lockout_is_told_not_stopped(settings):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "axes"]
    (found,) = checks.check_login_lockout()
    assert isinstance(found, Warning) and found.id == "tempo.W010"


def test_a_project_without_a_content_security_policy_is_told(settings):
    assert checks.check_content_security_policy() == []  # schedapp sets one
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != "csp.middleware.CSPMiddleware"]
    assert [m.id for m in checks.check_content_security_policy()] == ["tempo.W013"]


def test_a_login_url_that_answers_nothing_is_reported(settings):
    settings.LOGIN_URL = "/accounts/login/"
    assert [m.id for m in checks.check_login_url()] == ["tempo.W011"]
    settings.LOGIN_URL = "dashboard:login"
    assert checks.check_login_url() == []


def test_a_project_without_urls_is_checked_without_a_crash(settings):
    del settings.ROOT_URLCONF
    assert checks.check_login_url() == []


def test_a_tasks_backend_that_cannot_be_imported_is_an_error(settings):
    settings.TASKS = {"default": {"BACKEND": "tasksapp.backends.NoSuchBackend"}}
    (found,) = checks.check_configuration()
    assert isinstance(found, Error) and found.id == "tempo.E011"


def test_tempo_adds_its_part_to_a_projects_celery_app_and_keeps_its_routes():
    def project_router(name, args, kwargs, options, task=None, **kw):
        return None

    app = Celery("project", set_as_current=False)
    app.conf.task_routes = {"billing.*": {"queue": "billing"}}
    _with_tempo(app)
    _with_tempo(app)  # once only
    assert app.conf.task_routes == (route_to_tempo_queue, {"billing.*": {"queue": "billing"}})
    assert {HubWakeup} <= app.steps["worker"] and {HubWakeupReader} <= app.steps["consumer"]
    assert "tasksapp.run_jobs" in app.tasks
    assert route_to_tempo_queue("tasksapp.plan_due_slices", (), {}, {}) == {"queue": "tempo"}
    assert route_to_tempo_queue("billing.charge", (), {}, {}) is None
    other = Celery("other", set_as_current=False)
    other.conf.task_routes = [project_router]
    _with_tempo(other)
    assert other.conf.task_routes == (route_to_tempo_queue, project_router)


def test_a_worker_serves_the_default_queue_and_the_backends_queues(settings):
    settings.TASKS = {
        "default": {"BACKEND": "tasksapp.backends.TempoBackend", "QUEUES": ["default", "mail"]}
    }
    assert served_queues(None) == ["default", "mail"]
    assert served_queues("reports, default") == ["reports", "default"]


def test_without_a_project_app_tempo_makes_its_own_from_the_celery_settings(settings):
    from celery import _state

    from schedapp.celery import app as project_app
    from tasksapp.engine.worker.celery_app import _own_app, _project_app

    assert _project_app() is project_app  # the current app: the project's
    before = _state._tls.current_app
    _state._tls.current_app = None
    try:
        assert _project_app() is None
    finally:
        _state._tls.current_app = before
    settings.CELERY_WORKER_PREFETCH_MULTIPLIER = 3
    del settings.CELERY_DB_REUSE_MAX
    own = _own_app()
    assert own.main == "tempo" and own.conf.worker_prefetch_multiplier == 3
    assert own.conf.get("CELERY_DB_REUSE_MAX") == 1_000_000  # connections kept


def test_tempo_celery_app_names_the_project_app(settings):
    from tasksapp.engine.worker.celery_app import ERR_APP_SETTING, _project_app

    settings.TEMPO_CELERY_APP = "schedapp.celery.app"
    from schedapp.celery import app

    assert _project_app() is app
    settings.TEMPO_CELERY_APP = "schedapp.celery.os"
    with pytest.raises(ImproperlyConfigured) as refused:
        _project_app()
    assert str(refused.value) == ERR_APP_SETTING.format(reason="schedapp.celery.os is a module")


def test_no_broker_is_a_clear_error_before_any_process_starts(settings, monkeypatch):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from tasksapp.engine.worker import celery_app

    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    settings.CELERY_BROKER_URL = ""
    bare = Celery("bare", set_as_current=False)
    with pytest.raises(ImproperlyConfigured) as refused:
        celery_app.broker_url(bare)
    assert str(refused.value) == celery_app.ERR_NO_BROKER
    monkeypatch.setattr(celery_app, "_app", bare)
    for command in ("tempo_dispatcher", "tempo_worker", "tempo_beat"):
        with pytest.raises(CommandError, match="Tempo needs a message broker"):
            call_command(command)
