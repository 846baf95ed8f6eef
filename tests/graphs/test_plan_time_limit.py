"""Planning is bounded in time: a domain whose planning graph takes minutes to build (one
parameterised task over many objects) ends with a clear "no plan within ... s" error at
the limit, and a graph job asked for in a request stores nothing."""

from __future__ import annotations

import time

import pytest

from tasksapp.engine.models import Job
from tasksapp.graphs import planner
from tasksapp.graphs.grounding import ERR_TOO_MANY, MAX_GROUND_TASKS
from tasksapp.graphs.models import GraphRun
from tasksapp.graphs.planner import ERR_TOO_LONG, PlanningTooLong, graph_plan, plan_tasks
from tasksapp.graphs.registry import Registry, task_spec
from tasksapp.graphs.services import GraphInputError, graph_job_schedule
from tasksapp.graphs.services import schedule as schedule_svc
from tests.web.dashboard.fixtures import operator, operator_api, roles  # noqa: F401

# The API fixtures imported above are used as test arguments:
# ruff: noqa: F811

OBJECTS = 60  # 3,600 ground tasks: unbounded, planning takes well over ten seconds here
LIMIT = 0.3
MARGIN = 4.0  # the limit is checked often; this leaves room for a loaded machine


def move(inputs):
    return {}


def moves() -> Registry:
    """A token moved from node to node; wanting it at two nodes at once has no plan, and
    proving so builds a planning graph over every pair of nodes."""
    spec = task_spec(
        move,
        name="move",
        params={"a": "node", "b": "node"},
        requires=["at(a)"],
        provides=["at(b)"],
        consumes=["at(a)"],
    )
    return Registry([spec])


def request(objects: int = OBJECTS) -> dict:
    return {
        "has": {"at(n0)": True, "node": [f"n{i}" for i in range(objects)]},
        "wants": ["at(n1)", "at(n2)"],
    }


def expected_message() -> str:
    return ERR_TOO_LONG.format(seconds=LIMIT, tasks=OBJECTS * OBJECTS)


def test_the_planner_stops_at_its_time_limit():
    began = time.monotonic()
    with pytest.raises(PlanningTooLong) as caught:
        plan_tasks(tasks=moves().snapshot().specs, seconds=LIMIT, **request())
    assert time.monotonic() - began < LIMIT + MARGIN
    assert str(caught.value) == expected_message()
    assert caught.value.goals == frozenset()


def test_a_small_domain_is_planned_as_before_within_the_limit():
    with pytest.raises(planner.PlanningError) as caught:
        plan_tasks(tasks=moves().snapshot().specs, seconds=30.0, **request(objects=5))
    assert not isinstance(caught.value, PlanningTooLong)  # a real "no plan", proved
    found = graph_plan(
        has={"at(n0)": True, "node": ["n0", "n1", "n2"]},
        wants=["at(n2)"],
        registry=moves(),
        seconds=30.0,
    )
    assert found.tasks == ("move(n0,n2)",)


def test_a_plan_that_ran_out_of_time_is_not_cached():
    registry = moves()
    with pytest.raises(PlanningTooLong):
        graph_plan(registry=registry, seconds=LIMIT, **request())
    with pytest.raises(PlanningTooLong):
        graph_plan(registry=registry, seconds=LIMIT, **request())  # tried again, not a hit


def test_too_many_ground_tasks_are_refused_before_any_is_built():
    """Three parameters over 40 objects would be 64,000 ground tasks: counted, not built."""
    spec = task_spec(
        move,
        name="hop",
        params={"a": "node", "b": "node", "c": "node"},
        requires=["at(a)"],
        provides=["at(b)"],
    )
    began = time.monotonic()
    with pytest.raises(planner.PlanningError) as caught:
        plan_tasks(tasks=[spec], seconds=LIMIT, **request(objects=40))
    assert time.monotonic() - began < 1.0
    assert str(caught.value) == ERR_TOO_MANY.format(most=MAX_GROUND_TASKS)


@pytest.fixture
def bounded(monkeypatch):
    """The default registry holds the moves domain only, and the service's limit is short."""
    monkeypatch.setattr(planner, "default_registry", moves())
    monkeypatch.setattr(schedule_svc, "PLAN_SECONDS", LIMIT)


@pytest.mark.django_db
def test_scheduling_a_graph_job_ends_at_the_time_limit_and_stores_nothing(bounded):
    began = time.monotonic()
    with pytest.raises(GraphInputError) as caught:
        graph_job_schedule(**request())
    assert time.monotonic() - began < LIMIT + MARGIN
    assert str(caught.value) == expected_message()
    assert not Job.objects.exists() and not GraphRun.objects.exists()


@pytest.mark.django_db
def test_the_api_answers_400_saying_why(bounded, operator_api):
    response = operator_api.post("/api/graph-jobs/", request(), format="json")
    assert response.status_code == 400, response.json()
    assert response.json() == {"non_field_errors": [expected_message()]}
    assert not Job.objects.exists()
