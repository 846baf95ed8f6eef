"""The handler registry: only declared handlers are accepted or run, and nothing a caller
names is ever imported."""

from __future__ import annotations

import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from tasksapp.engine.ages import ERR_RETENTION
from tasksapp.engine.handlers import (
    ERR_HANDLER_DUPLICATE,
    ERR_HANDLER_MODULE,
    ERR_HANDLER_PATH,
    HandlerError,
    HandlerRegistry,
    handler_modules,
    job_handler,
    load_handler_modules,
    registry,
    resolve_handler,
)
from tasksapp.engine.models import FINAL_STATES, Job
from tasksapp.engine.services import JobInputError, job_schedule
from tests.handlers import recording

HOSTILE = [
    "os.system",
    "subprocess.run",
    "builtins.eval",
    "builtins.exit",
    "builtins.repr",
    "sys.exit",
    "pickle.loads",
    "antigravity.geohash",
    "this.nothing",
]


def greet(ctx):
    return "hi"


def test_a_decorated_function_is_registered_under_its_dotted_path():
    assert resolve_handler("tests.handlers.recording.record") is recording.record
    assert "tests.handlers.recording.record" in registry


def test_a_name_can_be_given_and_registering_again_is_a_no_op():
    local = HandlerRegistry()
    local.register(greet, name="greetings.hello")
    local.register(greet, name="greetings.hello")
    assert local.get("greetings.hello") is greet
    assert list(local) == ["greetings.hello"]


def test_another_function_under_a_taken_name_is_refused():
    local = HandlerRegistry()
    local.register(greet, name="greetings.hello")
    with pytest.raises(HandlerError) as raised:
        local.register(recording.noop, name="greetings.hello")
    assert str(raised.value) == ERR_HANDLER_DUPLICATE.format(name="greetings.hello")


def test_a_handler_may_declare_its_retention_ages_checked_at_registration():
    local = HandlerRegistry()
    local.register(greet, name="greetings.hello", retention={"succeeded": 90})
    assert local.retention() == {"greetings.hello": {"succeeded": 90.0}}
    with pytest.raises(HandlerError) as raised:
        local.register(recording.noop, name="greetings.bye", retention={"running": 1})
    assert str(raised.value) == ERR_RETENTION.format(states=", ".join(FINAL_STATES))
    assert "greetings.bye" not in local and "greetings.bye" not in local.retention()
    assert registry.retention()["tests.handlers.recording.kept"] == recording.KEPT_AGES


@pytest.mark.parametrize("name", ["nodots", "a..b", "a.b c", "a.b;c", "1a.b", "x." * 200 + "y"])
def test_a_name_that_is_not_a_dotted_identifier_is_refused(name):
    with pytest.raises(HandlerError) as raised:
        registry.get(name)
    assert str(raised.value) == ERR_HANDLER_PATH


def test_the_decorator_works_with_and_without_arguments():
    local_name = "tests.engine.test_handlers.decorated"
    try:

        @job_handler(name=local_name)
        def decorated(ctx):
            return 1

        assert resolve_handler(local_name) is decorated
    finally:
        registry.unregister(local_name)


@pytest.mark.parametrize("name", HOSTILE)
def test_importable_callables_that_are_not_registered_are_refused(name):
    with pytest.raises(HandlerError, match="is not registered"):
        resolve_handler(name)


def test_a_lookup_never_imports_the_module_it_names():
    name = "tests.handlers.imported_on_lookup.run"
    with pytest.raises(HandlerError):
        resolve_handler(name)
    assert "tests.handlers.imported_on_lookup" not in sys.modules


@pytest.mark.django_db
@pytest.mark.parametrize("name", HOSTILE)
def test_the_service_stores_nothing_for_an_unregistered_handler(name):
    with pytest.raises(JobInputError, match="is not registered"):
        job_schedule(handler=name, run_at=timezone.now())
    assert not Job.objects.exists()


def test_handler_modules_come_from_the_setting_and_the_apps(settings):
    settings.TEMPO_HANDLER_MODULES = ["tests.handlers.recording"]
    assert handler_modules() == ["tasksapp.recurring.handlers", "tests.handlers.recording"]


def test_the_setting_adds_to_tempos_own_handlers(settings):
    settings.TEMPO_HANDLER_MODULES = []
    assert handler_modules() == ["tasksapp.recurring.handlers"]


def test_a_listed_handler_module_that_is_missing_is_a_configuration_error(settings):
    settings.TEMPO_HANDLER_MODULES = ["tests.handlers.no_such_module"]
    with pytest.raises(ImproperlyConfigured) as refused:
        load_handler_modules()
    assert str(refused.value) == ERR_HANDLER_MODULE.format(
        setting="TEMPO_HANDLER_MODULES",
        module="tests.handlers.no_such_module",
        reason="no module named 'tests.handlers.no_such_module'",
    )


def test_the_demo_and_graph_handlers_are_registered_at_start_up():
    for name in (
        "tasksapp.demo.handlers.greet",
        "tasksapp.demo.handlers.flaky",
        "tasksapp.recurring.handlers.sync_member",
        "tasksapp.graphs.runner.start_graph",
        "tasksapp.graphs.runner.run_task",
        "tasksapp.graphs.runner.rollback_graph",
    ):
        assert name in registry


def test_a_handler_module_imports_before_django_is_set_up():
    """Scripts and benches import their handler modules first, then set Django up."""
    import subprocess
    from pathlib import Path

    code = (
        "from tasksapp.engine.handlers import job_handler\n"
        "@job_handler\n"
        "def early(ctx): return None\n"
        "@job_handler(retention={})\n"
        "def early_too(ctx): return None\n"
        "print('registered')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "registered"
