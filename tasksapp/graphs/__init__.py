"""Jobs as task graphs: tasks declare what they need and produce (``registry``), and a
GraphPlan planner turns "has X, wants Y" into layers of tasks (``planner``). Both are pure
Python: no database, no Celery. ``runner`` holds the handlers that run a graph's jobs on
the engine (tasksapp.graphs.services). See docs/GRAPHS.md."""

from tasksapp.graphs.context import raise_if_task_cancelled, task_cancel_requested
from tasksapp.graphs.planner import (
    Plan,
    PlanningError,
    PlanningGraph,
    Step,
    graph_plan,
    plan_cache_clear,
    plan_cache_info,
    plan_tasks,
)
from tasksapp.graphs.registry import (
    GraphTaskError,
    Registry,
    RegistrySnapshot,
    TaskSpec,
    autodiscover_graph_tasks,
    default_registry,
    graph_task,
    task_spec,
)

__all__ = [
    "GraphTaskError",
    "Plan",
    "PlanningError",
    "PlanningGraph",
    "Registry",
    "RegistrySnapshot",
    "Step",
    "TaskSpec",
    "autodiscover_graph_tasks",
    "default_registry",
    "graph_plan",
    "graph_task",
    "plan_cache_clear",
    "plan_cache_info",
    "plan_tasks",
    "raise_if_task_cancelled",
    "task_cancel_requested",
    "task_spec",
]
