"""A task graph laid out for an SVG drawing: layers left to right, each task a box,
an edge from every task it runs after. Computed here (pure), drawn by a template, so the
page needs no JavaScript library.

Within a layer, tasks are ordered by the mean position of the tasks they run after (the
barycentre heuristic of Sugiyama-style layered drawings), which keeps most edges short
and uncrossed; the first layer keeps the plan's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean

from tasksapp.graphs.selectors import GraphView, TaskView

NODE_W, NODE_H = 236, 46
GAP_X, GAP_Y, MARGIN = 56, 18, 12
LABEL_CHARS = 33


@dataclass(frozen=True)
class Node:
    task: str
    label: str
    state: str
    x: int
    y: int
    job_id: int | None
    detail: str  # attempts and duration, under the name

    @property
    def width(self) -> int:
        return NODE_W

    @property
    def height(self) -> int:
        return NODE_H


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str  # the SVG path: a curve from the source's right side to the target's left
    state: str  # the source's: an edge is "done" once its source succeeded


@dataclass(frozen=True)
class Drawing:
    width: int
    height: int
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]


def _label(task: str) -> str:
    return task if len(task) <= LABEL_CHARS else "…" + task[-(LABEL_CHARS - 1) :]


def _detail(view: TaskView) -> str:
    parts = []
    if view.attempts > 1:
        parts.append(f"{view.attempts} runs")
    if view.duration_ms is not None:
        parts.append(f"{view.duration_ms:.0f} ms")
    return " · ".join(parts) or view.state


def _ordered(layers: tuple[tuple[TaskView, ...], ...]) -> list[list[TaskView]]:
    """Each layer's tasks in barycentre order of the tasks they run after."""
    rows: dict[str, int] = {}
    ordered = []
    for index, layer in enumerate(layers):
        if index == 0:
            column = list(layer)
        else:
            column = sorted(
                layer,
                key=lambda v: fmean([rows[a] for a in v.after if a in rows] or [len(rows)]),
            )
        rows.update((view.task, row) for row, view in enumerate(column))
        ordered.append(column)
    return ordered


def graph_drawing(graph: GraphView) -> Drawing:
    columns = _ordered(graph.layers)
    tallest = max((len(column) for column in columns), default=0)
    height = 2 * MARGIN + tallest * NODE_H + max(tallest - 1, 0) * GAP_Y
    nodes: dict[str, Node] = {}
    for index, column in enumerate(columns):
        used = len(column) * NODE_H + max(len(column) - 1, 0) * GAP_Y
        top = (height - used) // 2
        for row, view in enumerate(column):
            nodes[view.task] = Node(
                task=view.task,
                label=_label(view.task),
                state=view.state,
                x=MARGIN + index * (NODE_W + GAP_X),
                y=top + row * (NODE_H + GAP_Y),
                job_id=view.job_id,
                detail=_detail(view),
            )
    edges = [
        _edge(nodes[source], nodes[view.task])
        for column in columns
        for view in column
        for source in view.after
        if source in nodes
    ]
    width = 2 * MARGIN + len(columns) * NODE_W + max(len(columns) - 1, 0) * GAP_X
    return Drawing(width, height, tuple(nodes.values()), tuple(edges))


def _edge(source: Node, target: Node) -> Edge:
    x1, y1 = source.x + NODE_W, source.y + NODE_H // 2
    x2, y2 = target.x - 6, target.y + NODE_H // 2  # the arrow head ends at the box
    bend = max((x2 - x1) // 2, 20)
    path = f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"
    return Edge(source.task, target.task, path, source.state)
