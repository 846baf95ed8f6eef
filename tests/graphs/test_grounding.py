"""Parameterised graph tasks: declared with typed parameters, grounded over the objects a
job names, planned minimally, and run with their inputs and outputs named as declared."""

from __future__ import annotations

import uuid

import pytest

from tasksapp.graphs.grounding import ERR_OBJECTS, atom, bound
from tasksapp.graphs.models import GraphState, TaskRun
from tasksapp.graphs.planner import PlanningError, graph_plan, plan_tasks
from tasksapp.graphs.registry import ERR_PARAMS, GraphTaskError, Registry, default_registry
from tasksapp.graphs.services import GraphInputError, graph_job_schedule
from tests.graphs.conftest import drain

SEEN: list[dict] = []


def social_registry() -> Registry:
    registry = Registry()

    @registry.task(params={"network": "network"}, requires=["user_id"], provides=["token(network)"])
    def load_token(inputs):
        SEEN.append(dict(inputs))
        return {"token(network)": f"token-{inputs['network']}"}

    @registry.task(
        params={"network": "network"}, requires=["token(network)"], provides=["posts(network)"]
    )
    def fetch_posts(inputs):
        SEEN.append(dict(inputs))
        return {"posts(network)": [inputs["network"]], "ignored": 1}

    @registry.task(requires=["posts(facebook)", "posts(google)"], provides=["feed"])
    def merge_feed(inputs):
        return {"feed": inputs["posts(facebook)"] + inputs["posts(google)"]}

    return registry


def names(registry: Registry, short: str) -> str:
    return next(spec.name for spec in registry if spec.name.endswith(short))


def test_atoms_and_their_arguments():
    assert atom("posts(network)") == ("posts", ("network",))
    assert atom("pair(a,b)") == ("pair", ("a", "b"))
    assert atom("user_id") == ("user_id", ())
    assert bound("pair(a,b)", {"a": "x"}) == "pair(x,b)"
    assert bound("user_id", {"user_id": "x"}) == "user_id"


def test_the_planner_grounds_tasks_over_the_named_objects():
    registry = social_registry()
    load, fetch = names(registry, "load_token"), names(registry, "fetch_posts")
    plan = graph_plan(
        has={"user_id": 7, "network": ["facebook", "google", "myspace"]},
        wants=["posts(facebook)", "posts(google)"],
        registry=registry,
    )
    assert plan.layers == (
        (f"{load}(facebook)", f"{load}(google)"),
        (f"{fetch}(facebook)", f"{fetch}(google)"),
    )  # myspace is an object, but nothing wants its posts: the plan stays minimal
    assert plan.steps[f"{fetch}(google)"].needs == {"token(google)": f"{load}(google)"}
    assert plan.goals == {
        "posts(facebook)": f"{fetch}(facebook)",
        "posts(google)": f"{fetch}(google)",
    }


def test_plain_tasks_use_ground_propositions():
    registry = social_registry()
    plan = graph_plan(
        has={"user_id": 7, "network": ["google", "facebook"]}, wants=["feed"], registry=registry
    )
    assert plan.layers[-1] == (names(registry, "merge_feed"),)
    assert len(plan.tasks) == 5


def test_without_the_objects_there_is_no_plan():
    with pytest.raises(PlanningError, match="no task provides 'posts\\(google\\)'"):
        graph_plan(
            has={"user_id": 7, "network": ["facebook"]},
            wants=["posts(google)"],
            registry=social_registry(),
        )


def test_the_objects_are_part_of_the_plan_cache_key():
    registry = social_registry()
    one = graph_plan(has={"user_id": 1, "network": ["a"]}, wants=["posts(a)"], registry=registry)
    assert one.tasks[-1].endswith("(a)")
    with pytest.raises(PlanningError):  # the same has keys and wants, other objects
        graph_plan(has={"user_id": 1, "network": ["b"]}, wants=["posts(a)"], registry=registry)


@pytest.mark.parametrize("objects", ["facebook", [1, 2], ["has space"], ["a(b)"]])
def test_objects_that_are_not_a_list_of_names_are_refused(objects):
    with pytest.raises(PlanningError) as refused:
        graph_plan(
            has={"user_id": 1, "network": objects}, wants=["posts(a)"], registry=social_registry()
        )
    assert str(refused.value) == ERR_OBJECTS.format(type="network")


def test_a_ground_task_runs_the_function_with_inputs_named_as_declared():
    registry = social_registry()
    fetch = names(registry, "fetch_posts")
    SEEN.clear()
    spec = registry.get(f"{fetch}(google)")
    assert spec.requires == {"token(google)"} and spec.provides == {"posts(google)"}
    assert spec.call({"token(google)": "t"}) == {"posts(google)": ["google"]}
    assert SEEN == [{"token(network)": "t", "network": "google"}]
    with pytest.raises(GraphTaskError):
        registry.get(f"{fetch}(a,b)")  # one parameter only


def test_plain_task_definitions_and_fingerprints_do_not_change():
    spec = default_registry.get("test.a")
    assert len(spec.definition) == 6 and spec.params == ()


@pytest.mark.parametrize("params", ["network", {"network": "not a type"}, {"1x": "t"}])
def test_bad_parameter_declarations_are_refused(params):
    registry = Registry()
    with pytest.raises(GraphTaskError) as refused:
        registry.task(name="t", params=params, requires=[], provides=["p(t)"])(lambda inputs: {})
    assert str(refused.value) == ERR_PARAMS.format(name="t")


def test_grounding_plans_like_the_ground_tasks_declared_by_hand():
    """Grounding is the same as declaring every ground task by hand."""
    registry = social_registry()
    has = {"user_id": 1, "network": ["x", "y"]}
    planned = graph_plan(has=has, wants=["posts(x)", "posts(y)"], registry=registry)
    ground = [registry.get(name) for name in planned.tasks]
    by_hand = plan_tasks(tasks=ground, has=has, wants=["posts(x)", "posts(y)"])
    assert by_hand.layers == planned.layers


@pytest.mark.django_db(transaction=True)
def test_a_parameterised_graph_job_runs_on_the_engine(calls):
    key = uuid.uuid4().hex[:8]
    graph = graph_job_schedule(
        has={"seed": 1, "key": key, "network": ["facebook", "google"]},
        wants=["posts(facebook)", "posts(google)"],
    )
    drain()
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED, graph.error
    assert graph.result == {
        "posts(facebook)": ["facebook:t-facebook:0", "facebook:t-facebook:1"],
        "posts(google)": ["google:t-google:0", "google:t-google:1"],
    }
    assert sorted(TaskRun.objects.filter(graph_run=graph).values_list("task", flat=True)) == [
        "test.posts(facebook)",
        "test.posts(google)",
        "test.token(facebook)",
        "test.token(google)",
    ]
    assert sorted(calls.order(key=key)) == sorted(
        ["test.token(facebook)", "test.token(google)", "test.posts(facebook)", "test.posts(google)"]
    )


@pytest.mark.django_db
def test_bad_objects_are_a_graph_input_error():
    with pytest.raises(GraphInputError, match="has\\['network'\\] must be a list"):
        graph_job_schedule(has={"seed": 1, "network": "google"}, wants=["posts(google)"])
