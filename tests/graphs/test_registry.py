"""The graph-task registry: declarations, their validation, fingerprints, discovery."""

from __future__ import annotations

import pytest

from tasksapp.demo import graph_tasks as demo_tasks
from tasksapp.graphs.registry import (
    ERR_DUPLICATE,
    ERR_NAMES,
    ERR_NO_PROVIDES,
    ERR_NOT_CALLABLE,
    ERR_OUTPUT_MISSING,
    ERR_OUTPUT_TYPE,
    ERR_PROPOSITION,
    ERR_PROVIDES_CONSUMES,
    ERR_UNKNOWN,
    GraphTaskError,
    Registry,
    autodiscover_graph_tasks,
    default_registry,
    graph_task,
    task_spec,
)


def fetch(inputs):
    return {"friends": [inputs["user_id"]], "extra": 1}


def other(inputs):
    return {}


def test_decorator_registers_under_the_dotted_path_and_returns_the_function():
    registry = Registry()

    decorated = graph_task(requires=["user_id"], provides=["friends"], registry=registry)(fetch)

    assert decorated is fetch
    spec = registry.get(f"{__name__}.fetch")
    assert fetch.graph_task is spec
    assert spec.requires == {"user_id"}
    assert spec.provides == {"friends"}
    assert spec.consumes == frozenset()


def test_explicit_name_and_hooks_are_kept():
    registry = Registry()

    def rescue(inputs, error):
        return None

    def rollback(inputs, outputs):
        return None

    registry.task(
        name="friends.fetch",
        requires=["user_id"],
        provides=["friends"],
        consumes=["token"],
        optional=["latency_scale"],
        rescue=rescue,
        rollback=rollback,
    )(fetch)

    spec = registry.get("friends.fetch")
    assert (spec.consumes, spec.optional) == ({"token"}, {"latency_scale"})
    assert (spec.rescue, spec.rollback) == (rescue, rollback)
    assert "friends.fetch" in registry and len(registry) == 1


def test_registering_the_same_definition_twice_is_a_no_op():
    registry = Registry()
    first = registry.register(task_spec(fetch, requires=["user_id"], provides=["friends"]))

    again = registry.register(task_spec(fetch, requires=("user_id",), provides={"friends"}))

    assert again is first
    assert len(registry) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"requires": ["user_id", "token"]},
        {"provides": ["friends", "circles"]},
        {"consumes": ["user_id"]},
        {"func": other},
    ],
)
def test_registering_a_different_definition_under_a_used_name_is_an_error(change):
    registry = Registry()
    declaration = {"func": fetch, "requires": ["user_id"], "provides": ["friends"], "name": "t"}
    registry.register(task_spec(**declaration))

    with pytest.raises(GraphTaskError) as error:
        registry.register(task_spec(**{**declaration, **change}))

    assert str(error.value) == ERR_DUPLICATE.format(name="t")


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        (
            {"requires": "user_id", "provides": ["x"]},
            ERR_NAMES.format(field="requires", name="t"),
        ),
        (
            {"requires": [], "provides": ["two words"]},
            ERR_PROPOSITION.format(field="provides", name="t", prop="two words"),
        ),
        (
            {"requires": ["¬x"], "provides": ["y"]},
            ERR_PROPOSITION.format(field="requires", name="t", prop="¬x"),
        ),
        (
            {"requires": [""], "provides": ["y"]},
            ERR_PROPOSITION.format(field="requires", name="t", prop=""),
        ),
        ({"requires": ["x"], "provides": []}, ERR_NO_PROVIDES.format(name="t")),
        (
            {"requires": ["x"], "provides": ["y", "z"], "consumes": ["z", "y"]},
            ERR_PROVIDES_CONSUMES.format(name="t", props="'y', 'z'"),
        ),
        (
            {"requires": ["x"], "provides": ["y"], "rescue": "not callable"},
            ERR_NOT_CALLABLE.format(field="rescue", name="t"),
        ),
    ],
)
def test_invalid_declarations_are_rejected_with_a_clear_message(declaration, message):
    with pytest.raises(GraphTaskError) as error:
        task_spec(fetch, name="t", **declaration)

    assert str(error.value) == message


def test_unknown_task_name():
    with pytest.raises(GraphTaskError) as error:
        Registry().get("nope")

    assert str(error.value) == ERR_UNKNOWN.format(name="nope")


def test_fingerprint_depends_on_the_definitions_only():
    a = task_spec(fetch, name="a", requires=["x"], provides=["y"])
    b = task_spec(other, name="b", requires=["y"], provides=["z"])
    b_consuming = task_spec(other, name="b", requires=["y"], provides=["z"], consumes=["x"])

    assert Registry([a, b]).fingerprint() == Registry([b, a]).fingerprint()
    assert Registry([a, b]).fingerprint() != Registry([a]).fingerprint()
    assert Registry([a, b]).fingerprint() != Registry([a, b_consuming]).fingerprint()


def test_snapshot_is_immutable_cached_and_compared_by_fingerprint():
    registry = Registry([task_spec(fetch, name="a", requires=["x"], provides=["y"])])
    snapshot = registry.snapshot()

    assert registry.snapshot() is snapshot
    assert snapshot == Registry(registry).snapshot()
    assert hash(snapshot) == hash(Registry(registry).snapshot())
    assert [spec.name for spec in snapshot.specs] == ["a"]

    registry.register(task_spec(other, name="b", requires=["y"], provides=["z"]))

    assert registry.snapshot() != snapshot
    assert [spec.name for spec in snapshot.specs] == ["a"]


def test_call_returns_exactly_the_provided_values():
    spec = task_spec(fetch, name="t", requires=["user_id"], provides=["friends"])

    assert spec.call({"user_id": 7}) == {"friends": [7]}


def test_outputs_must_be_a_dict_with_every_provided_value():
    spec = task_spec(fetch, name="t", requires=["user_id"], provides=["friends", "circles"])

    with pytest.raises(GraphTaskError) as missing:
        spec.call({"user_id": 7})
    with pytest.raises(GraphTaskError) as not_a_dict:
        spec.check_outputs(["friends"])

    assert str(missing.value) == ERR_OUTPUT_MISSING.format(name="t", props="'circles'")
    assert str(not_a_dict.value) == ERR_OUTPUT_TYPE.format(name="t", kind=list)


def test_demo_tasks_are_in_the_default_registry():
    spec = default_registry.get("demo.fetch_google_circles")

    assert spec.func is demo_tasks.fetch_google_circles
    assert spec.rescue is demo_tasks.refresh_google_token
    assert default_registry.get("demo.suggest").rollback is demo_tasks.withdraw_suggestions


def test_demo_task_contract():
    inputs = {"user_id": 7, "google_token": "g", "latency_scale": 0, "failure_rate": 0}

    circles = default_registry.get("demo.fetch_google_circles").call(inputs)

    assert set(circles) == {"google_circles"}
    assert circles == default_registry.get("demo.fetch_google_circles").call(inputs)


def test_demo_failures_follow_the_failure_rate_and_rescue_refreshes_the_token():
    inputs = {"user_id": 7, "google_token": "g", "latency_scale": 0, "failure_rate": 1}
    spec = default_registry.get("demo.fetch_google_circles")

    with pytest.raises(demo_tasks.InvalidToken) as error:
        spec.call(inputs)

    assert spec.rescue(inputs, error.value) == {"google_token": "google-token-7-refreshed"}
    assert spec.rescue(inputs, demo_tasks.ServiceUnavailable()) is None


def test_autodiscover_imports_listed_modules(settings):
    settings.TEMPO_GRAPH_TASK_MODULES = ["tasksapp.demo.graph_tasks"]

    assert autodiscover_graph_tasks() == ["tasksapp.demo.graph_tasks"]


def test_autodiscover_without_the_setting_finds_no_app_modules(settings):
    del settings.TEMPO_GRAPH_TASK_MODULES

    assert autodiscover_graph_tasks() == []


def test_autodiscover_reports_a_listed_module_that_does_not_exist(settings):
    settings.TEMPO_GRAPH_TASK_MODULES = ["tasksapp.graphs.no_such_module"]

    with pytest.raises(ModuleNotFoundError):
        autodiscover_graph_tasks()
