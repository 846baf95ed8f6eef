"""The graph drawn as a DAG on the job page (laid out server-side), its live-refresh part,
and the list of graph runs with its filters."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tasksapp.graphs.models import GraphRun
from tasksapp.graphs.selectors import graph_run_get
from tasksapp.graphs.services import graph_cancel, graph_job_schedule
from tasksapp.web.dashboard.graph_svg import GAP_Y, NODE_H, NODE_W, graph_drawing
from tests.web.dashboard.fixtures import run_demo_graph

HAS = {"user_id": 7, "latency_scale": 0, "failure_rate": 0}


@pytest.mark.django_db(transaction=True)
def test_the_drawing_has_a_box_per_task_and_an_edge_per_dependency():
    graph = run_demo_graph(wants=("suggestions",))
    view = graph_run_get(graph_run_id=graph.id)
    drawing = graph_drawing(view)
    assert {node.task for node in drawing.nodes} == {task.task for task in view.tasks}
    assert sorted((e.source, e.target) for e in drawing.edges) == sorted(
        (source, task.task) for task in view.tasks for source in task.after
    )
    by_task = {node.task: node for node in drawing.nodes}
    for task in view.tasks:  # layers left to right, every edge points right
        assert by_task[task.task].x == 12 + task.layer * (NODE_W + 56)
        for source in task.after:
            assert by_task[source].x < by_task[task.task].x
    columns: dict[int, list[int]] = {}
    for node in drawing.nodes:
        columns.setdefault(node.x, []).append(node.y)
    for ys in columns.values():  # boxes of a layer never overlap
        ys.sort()
        assert all(b - a >= NODE_H + GAP_Y for a, b in zip(ys, ys[1:], strict=False))
    assert {node.state for node in drawing.nodes} == {"succeeded"}


@pytest.mark.django_db(transaction=True)
def test_the_job_page_draws_the_graph_and_its_part_refreshes(viewer_client):
    graph = run_demo_graph()
    page = viewer_client.get(reverse("dashboard:job-detail", args=[graph.job_id])).content.decode()
    assert '<svg class="graph-svg"' in page and 'data-done="true"' in page
    assert page.count('<g class="gnode succeeded"') == len(graph.plan["after"])
    assert "dashboard/graph.js" in page
    part = viewer_client.get(
        reverse("dashboard:job-detail", args=[graph.job_id]), {"part": "graph"}
    )
    html = part.content.decode()
    assert html.lstrip().startswith('<section class="card mb-16" id="graph"')
    assert "<html" not in html and html.count('class="gedge') == sum(
        len(after) for after in graph.plan["after"].values()
    )


@pytest.mark.django_db
def test_a_pending_graph_is_drawn_waiting_and_refreshes(viewer_client):
    graph = graph_job_schedule(has=HAS, wants=["friends"])
    page = viewer_client.get(reverse("dashboard:job-detail", args=[graph.job_id])).content.decode()
    assert 'data-done="false"' in page and "refreshing every 2 s" in page
    assert len(re.findall(r'<g class="gnode waiting"', page)) == len(graph.plan["after"])


@pytest.mark.django_db
def test_the_graph_list_filters_by_state_and_goal(viewer_client):
    friends = graph_job_schedule(has=HAS, wants=["friends"])
    suggestions = graph_job_schedule(has=HAS, wants=["suggestions"])
    graph_cancel(graph_run_id=suggestions.id)
    url = reverse("dashboard:graph-list")

    def shown(**query) -> list[int]:
        html = viewer_client.get(url, query).content.decode()
        return [
            int(n) for n in re.findall(r'<tr data-state="[a-z_]+">\s*<td class="num">(\d+)', html)
        ]

    assert shown() == [suggestions.id, friends.id]
    assert shown(state="cancelled") == [suggestions.id]
    assert shown(goal="friends") == [friends.id]
    assert shown(goal="friend") == []  # a whole wanted name, not a part of one
    assert shown(state="pending", goal="suggestions") == []
    bad = viewer_client.get(url, {"state": "nope"})
    assert bad.status_code == 400 and "state must be one of" in bad.content.decode()
    assert GraphRun.objects.count() == 2
