"""The GraphPlan planner: the thesis's examples, the mutex rules, errors, caching, and
properties on random domains (checked by running the plan, and against a brute-force
search for small domains)."""

from __future__ import annotations

import json
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.graphs.planner_bench import random_layered_domain
from tasksapp.demo import graph_tasks as demo_tasks
from tasksapp.graphs.planner import (
    ERR_CANNOT_PRODUCE,
    ERR_CYCLE,
    ERR_EXCLUSIVE,
    ERR_NAMES,
    ERR_NEEDS_EXCLUSIVE,
    ERR_NO_ORDER,
    ERR_NO_PROVIDER,
    Plan,
    PlanningError,
    PlanningGraph,
    graph_plan,
    plan_cache_clear,
    plan_cache_info,
    plan_tasks,
)
from tasksapp.graphs.registry import Registry, TaskSpec, default_registry, task_spec

FETCHERS = (
    "demo.fetch_facebook_friends",
    "demo.fetch_google_circles",
    "demo.fetch_soundcloud_follows",
    "demo.fetch_youtube_subscriptions",
)


def noop(inputs):
    return {}


def t(name, requires=(), provides=(), consumes=()) -> TaskSpec:
    return task_spec(noop, name=name, requires=requires, provides=provides, consumes=consumes)


def demo_registry(without=()) -> Registry:
    return Registry(
        spec
        for spec in default_registry
        if spec.name.startswith("demo.") and spec.name not in without
    )


def conflict(a: TaskSpec, b: TaskSpec) -> bool:
    return bool(a.consumes & (b.requires | b.provides) or b.consumes & (a.requires | a.provides))


def run(plan: Plan, tasks, has) -> set[str]:
    """Run the plan layer by layer and check it on the way: the test's own oracle."""
    specs = {spec.name: spec for spec in tasks}
    state, done = set(has), set()
    for index, layer in enumerate(plan.layers):
        for name in layer:
            spec, step = specs[name], plan.steps[name]
            assert spec.requires <= state, f"{name} runs without {spec.requires - state}"
            assert step.layer == index and step.after <= done
            for prop, source in step.needs.items():
                assert source is None and prop in has or prop in specs[source].provides
        for a in layer:
            assert not any(conflict(specs[a], specs[b]) for b in layer if a < b), layer
        for name in layer:
            state -= specs[name].consumes
        for name in layer:
            state |= specs[name].provides
        done |= set(layer)
    return state


def solvable_with_each_task_once(tasks, has, wants) -> bool:
    """Breadth-first search over states: the brute-force answer for small domains."""
    start = (frozenset(has), frozenset())
    seen, queue = {start}, deque([start])
    while queue:
        state, used = queue.popleft()
        if wants <= state:
            return True
        for spec in tasks:
            if spec.name not in used and spec.requires <= state:
                after = ((state - spec.consumes) | spec.provides, used | {spec.name})
                if after not in seen:
                    seen.add(after)
                    queue.append(after)
    return False


@pytest.fixture(autouse=True)
def _fresh_cache():
    plan_cache_clear()
    yield
    plan_cache_clear()


# --- the thesis's examples -----------------------------------------------------------


def test_friends_job_fetches_the_four_networks_in_parallel_then_merges():
    job = demo_tasks.DEMO_JOBS["friends"]

    plan = graph_plan(has={"user_id": 42}, wants=job["wants"], registry=demo_registry())

    assert job["has"] == ["user_id"]
    assert plan.layers == (("demo.load_tokens",), FETCHERS, ("demo.merge_friends",))
    assert dict(plan.steps["demo.fetch_google_circles"].needs) == {
        "google_token": "demo.load_tokens",
        "user_id": None,
    }
    assert plan.steps["demo.merge_friends"].after == set(FETCHERS)
    assert dict(plan.goals) == {"friends": "demo.merge_friends"}


def test_tasks_not_needed_for_the_goal_are_left_out():
    registry = demo_registry()

    plan = graph_plan(has={"user_id": 42, "interests": []}, wants=["friends"], registry=registry)

    assert len(registry) == 13
    assert set(plan.tasks) == {"demo.load_tokens", *FETCHERS, "demo.merge_friends"}


def test_a_task_is_ready_when_its_own_inputs_exist_not_when_its_layer_is_done():
    plan = graph_plan(has={"user_id": 42}, wants=["suggestions"], registry=demo_registry())
    friends_done = {"demo.load_tokens", *FETCHERS, "demo.merge_friends"}

    assert plan.ready(()) == ("demo.load_interests", "demo.load_tokens")
    assert plan.ready({"demo.load_tokens"}) == ("demo.load_interests", *FETCHERS)
    assert plan.ready(friends_done) == (
        "demo.load_interests",
        "demo.fetch_soundcloud_played",
        "demo.fetch_soundcloud_rated",
        "demo.fetch_youtube_rated",
        "demo.fetch_youtube_watched",
    )
    assert plan.tasks[-2:] == ("demo.filter_media", "demo.suggest")


def test_the_suggestions_plan_runs_to_its_goal():
    registry = demo_registry()
    has = {"user_id": 42, "latency_scale": 0, "failure_rate": 0}
    plan = graph_plan(has=has, wants=["suggestions"], registry=registry)
    outputs: dict[str, dict] = {}

    for name in plan.tasks:
        spec, step = registry.get(name), plan.steps[name]
        inputs = {p: has[p] if src is None else outputs[src][p] for p, src in step.needs.items()}
        inputs.update((name, has[name]) for name in spec.optional if name in has)
        outputs[name] = spec.call(inputs)

    suggestions = outputs[plan.goals["suggestions"]]["suggestions"]
    assert suggestions and {"id", "friends"} <= set(suggestions[0])


def transport(cargos=("c",)) -> list[TaskSpec]:
    """Programm 3.1 of the thesis, instantiated for one plane flying from A to B."""
    tasks = [t("fly(p,A,B)", ["plane_at_A"], ["plane_at_B"], consumes=["plane_at_A"])]
    for c in cargos:
        tasks.append(t(f"load({c},p,A)", [f"{c}_at_A", "plane_at_A"], [f"{c}_in_p"], [f"{c}_at_A"]))
        tasks.append(
            t(f"unload({c},p,B)", [f"{c}_in_p", "plane_at_B"], [f"{c}_at_B"], [f"{c}_in_p"])
        )
    return tasks


def test_transport_loads_flies_and_unloads_in_three_layers():
    plan = plan_tasks(tasks=transport(), has={"c_at_A", "plane_at_A"}, wants={"c_at_B"})

    assert plan.layers == (("load(c,p,A)",), ("fly(p,A,B)",), ("unload(c,p,B)",))
    # fly needs nothing load provides, yet must wait: it takes the plane away from A.
    assert plan.steps["fly(p,A,B)"].after == {"load(c,p,A)"}
    assert dict(plan.steps["unload(c,p,B)"].needs) == {
        "c_in_p": "load(c,p,A)",
        "plane_at_B": "fly(p,A,B)",
    }


def test_transport_loads_and_unloads_all_cargo_in_parallel():
    tasks = transport(cargos=("c1", "c2"))

    plan = plan_tasks(
        tasks=tasks, has={"c1_at_A", "c2_at_A", "plane_at_A"}, wants={"c1_at_B", "c2_at_B"}
    )

    assert plan.layers == (
        ("load(c1,p,A)", "load(c2,p,A)"),
        ("fly(p,A,B)",),
        ("unload(c1,p,B)", "unload(c2,p,B)"),
    )
    assert run(plan, tasks, plan.has) >= {"c1_at_B", "c2_at_B"}


# --- mutex rules: each domain tempts a naive planner to run two tasks together ----------


def test_inconsistent_effects_keep_tasks_apart():
    tasks = [t("A", ["s"], ["p"], consumes=["q"]), t("B", ["s"], ["q"])]
    graph = PlanningGraph(tasks, {"s"})
    graph.extend()

    plan = plan_tasks(tasks=tasks, has={"s"}, wants={"p", "q"})

    assert graph.tasks(1) == {"A", "B"} and graph.tasks_mutex(1, "A", "B")
    assert graph.propositions_mutex(1, "p", "q")
    assert plan.layers == (("A",), ("B",))


def test_interference_keeps_tasks_apart():
    tasks = [t("A", ["s", "r"], ["p"]), t("B", ["s"], ["q"], consumes=["r"])]
    graph = PlanningGraph(tasks, {"s", "r"})
    graph.extend()

    plan = plan_tasks(tasks=tasks, has={"s", "r"}, wants={"p", "q"})

    assert graph.tasks_mutex(1, "A", "B") and graph.tasks_mutex(1, "B", "A")
    assert graph.propositions_mutex(1, "r", "¬r")
    assert plan.layers == (("A",), ("B",))
    assert plan.steps["B"].after == {"A"}


def test_competing_needs_keep_tasks_apart():
    tasks = [
        t("MX", ["s"], ["x"], consumes=["y"]),
        t("MY", ["s"], ["y"], consumes=["x"]),
        t("A", ["x"], ["a"]),
        t("B", ["y"], ["b"]),
    ]
    graph = PlanningGraph(tasks, {"s"})
    graph.extend()
    graph.extend()

    plan = plan_tasks(tasks=tasks, has={"s"}, wants={"a", "b"})

    assert graph.propositions_mutex(1, "x", "y")
    assert graph.tasks(2) >= {"A", "B"} and graph.tasks_mutex(2, "A", "B")
    assert plan.layers in ((("MX",), ("A",), ("MY",), ("B",)), (("MY",), ("B",), ("MX",), ("A",)))
    assert run(plan, tasks, {"s"}) >= {"a", "b"}


# --- no plan ---------------------------------------------------------------------------


def test_unreachable_goal_names_what_is_missing():
    registry = demo_registry(without={"demo.load_tokens"})

    with pytest.raises(PlanningError) as error:
        graph_plan(has={"user_id": 42}, wants=["friends"], registry=registry)

    missing = ["facebook_token", "google_token", "soundcloud_token", "youtube_token"]
    reasons = "; ".join(ERR_NO_PROVIDER.format(prop=prop) for prop in missing)
    assert str(error.value) == ERR_CANNOT_PRODUCE.format(goal="friends", reasons=reasons)
    assert str(error.value).startswith(
        "cannot produce 'friends': no task provides 'facebook_token'; no task provides"
    )
    assert error.value.goals == {"friends"}
    assert error.value.missing == set(missing)


def test_each_unreachable_goal_gets_its_own_reason():
    with pytest.raises(PlanningError) as error:
        graph_plan(has={}, wants=["friends", "weather"], registry=demo_registry())

    assert str(error.value) == (
        "cannot produce 'friends': no task provides 'user_id'; "
        "cannot produce 'weather': no task provides 'weather'"
    )


def test_a_goal_only_reachable_through_itself():
    tasks = [t("A", ["b"], ["a"]), t("B", ["a"], ["b"])]

    with pytest.raises(PlanningError) as error:
        plan_tasks(tasks=tasks, has=set(), wants={"a"})

    assert str(error.value) == ERR_CANNOT_PRODUCE.format(goal="a", reasons=ERR_CYCLE)


def test_goals_that_undo_each_other():
    # One token; each use consumes it, and a task runs at most once per job.
    tasks = [
        t("get_token", ["s"], ["token"]),
        t("use_a", ["token"], ["a"], consumes=["token"]),
        t("use_b", ["token"], ["b"], consumes=["token"]),
    ]

    with pytest.raises(PlanningError) as error:
        plan_tasks(tasks=tasks, has={"s"}, wants={"a", "b"})

    assert str(error.value) == ERR_EXCLUSIVE.format(first="a", second="b")


def test_a_goal_whose_only_task_needs_two_exclusive_things():
    tasks = [
        t("MX", ["s"], ["x"], consumes=["y"]),
        t("MY", ["s"], ["y"], consumes=["x"]),
        t("T", ["x", "y"], ["c"]),
    ]

    with pytest.raises(PlanningError) as error:
        plan_tasks(tasks=tasks, has={"s"}, wants={"c"})

    reason = ERR_NEEDS_EXCLUSIVE.format(task="T", a="x", b="y")
    assert str(error.value) == ERR_CANNOT_PRODUCE.format(goal="c", reasons=reason)


def test_goals_pairwise_possible_but_not_all_at_once():
    # Two tokens, three goals, each use consumes one token.
    tasks = [t(f"use_{g}{k}", [f"t{k}"], [g], [f"t{k}"]) for g in "abc" for k in (1, 2)]

    two = plan_tasks(tasks=tasks, has={"t1", "t2"}, wants={"a", "b"})
    with pytest.raises(PlanningError) as error:
        plan_tasks(tasks=tasks, has={"t1", "t2"}, wants={"a", "b", "c"})

    assert len(two.tasks) == 2
    assert str(error.value) == ERR_NO_ORDER.format(goals="'a', 'b' and 'c'")
    assert error.value.goals == {"a", "b", "c"}


def test_wants_must_not_be_a_bare_string():
    with pytest.raises(PlanningError) as error:
        graph_plan(has={"user_id": 1}, wants="friends", registry=demo_registry())

    assert str(error.value) == ERR_NAMES.format(field="wants")


def test_goals_already_held_need_no_task():
    plan = graph_plan(has={"friends": []}, wants=["friends"], registry=demo_registry())

    assert plan.layers == () and dict(plan.goals) == {"friends": None}


# --- caching and the plan's API ----------------------------------------------------------


def test_plans_are_cached_by_fingerprint_has_keys_and_wants():
    registry = demo_registry()

    first = graph_plan(has={"user_id": 1}, wants=["friends"], registry=registry)
    second = graph_plan(has={"user_id": 2}, wants=("friends",), registry=demo_registry())

    assert second is first
    assert plan_cache_info().hits == 1 and plan_cache_info().misses == 1
    assert first.fingerprint == registry.fingerprint()


def test_a_changed_registry_is_planned_again():
    registry = demo_registry()
    first = graph_plan(has={"user_id": 1}, wants=["friends"], registry=registry)

    registry.register(t("cached_friends", ["user_id"], ["friends"]))
    second = graph_plan(has={"user_id": 1}, wants=["friends"], registry=registry)

    assert second is not first
    assert second.layers == (("cached_friends",),)


def test_plan_survives_a_json_round_trip_and_is_read_only():
    plan = graph_plan(has={"user_id": 1}, wants=["suggestions"], registry=demo_registry())

    again = Plan.from_dict(json.loads(json.dumps(plan.as_dict())))

    assert again == plan
    with pytest.raises(TypeError):
        plan.steps["demo.suggest"] = None  # type: ignore[index]


# --- random domains --------------------------------------------------------------------


def test_a_200_task_random_layered_domain():
    domain = random_layered_domain(size=200, seed=7)

    plan = plan_tasks(tasks=domain.registry, has=domain.has, wants=domain.wants)

    assert run(plan, domain.registry, domain.has) >= domain.wants
    assert len(plan.layers) >= 10 and len(plan.tasks) < 200


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=60),
    seed=st.integers(min_value=0, max_value=10**6),
    width=st.integers(min_value=2, max_value=12),
    consume_rate=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_plans_for_random_layered_domains_run_to_their_goals(size, seed, width, consume_rate):
    domain = random_layered_domain(size=size, seed=seed, width=width, consume_rate=consume_rate)

    plan = plan_tasks(tasks=domain.registry, has=domain.has, wants=domain.wants)

    assert run(plan, domain.registry, domain.has) >= domain.wants
    assert plan.goals.keys() == domain.wants


PROPS = ("a", "b", "c", "d", "e")
names = st.frozensets(st.sampled_from(PROPS), max_size=2)


@st.composite
def small_domains(draw):
    tasks = []
    for index in range(draw(st.integers(min_value=1, max_value=5))):
        provides = draw(st.frozensets(st.sampled_from(PROPS), min_size=1, max_size=2))
        consumes = draw(names) - provides
        tasks.append(t(f"t{index}", draw(names), provides, consumes))
    wants = draw(st.frozensets(st.sampled_from(PROPS), min_size=1, max_size=3))
    return tasks, draw(names), wants


@settings(max_examples=400, deadline=None)
@given(small_domains())
def test_a_plan_exists_exactly_when_brute_force_finds_one(domain):
    tasks, has, wants = domain

    try:
        plan = plan_tasks(tasks=tasks, has=has, wants=wants)
    except PlanningError:
        plan = None

    assert (plan is not None) == solvable_with_each_task_once(tasks, has, wants)
    if plan is not None:
        assert run(plan, tasks, has) >= wants
