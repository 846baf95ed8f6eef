"""Jobs as GraphPlan task graphs: scheduling a graph job with its plan, starting it,
running each task as a child job of the engine and applying the graph's failure
strategy. See docs/GRAPHS.md, "Execution".

Release-once: every write to a graph's TaskRuns and to its GraphRun happens with the
GraphRun row locked (SELECT ... FOR UPDATE), inside the transaction of the job that
causes it (the parent job's start, or the child job of the task that completed). The
lock is taken after the task ran, so tasks run in parallel; completions serialise on it,
and each sees the others' committed outcomes: a dependant is released by exactly one of
them. A child job's idempotency key (graph, task, generation, attempt) is a second line
of defence.
"""

from .cancel import graph_cancel
from .common import GraphInputError
from .execution import graph_start, task_run_execute
from .failures import graph_rollback
from .schedule import graph_job_schedule, graph_job_schedule_or_get

__all__ = [
    "GraphInputError",
    "graph_cancel",
    "graph_job_schedule",
    "graph_job_schedule_or_get",
    "graph_rollback",
    "graph_start",
    "task_run_execute",
]
