"""Handlers of graph jobs (thin adapters over `tasksapp.graphs.services`).

- ``start_graph``: the parent job (transactional): creates the TaskRuns and the child
  jobs of the tasks that run first. It succeeds once the graph has started; the graph's
  own outcome and result are on its GraphRun.
- ``run_task``: one run of one task (transactional child job).
- ``rollback_graph``: the rollback strategy's job (at least once; each undone task is
  committed on its own).
"""

from __future__ import annotations

from tasksapp.engine.handlers import JobContext, job_handler
from tasksapp.graphs.context import running_task_job
from tasksapp.graphs.services import graph_rollback, graph_start, task_run_execute


# Graph handlers lock their GraphRun row: each job commits alone, so that no lock is held
# while other jobs of a batch run (two groups locking two graphs in turn could deadlock).
@job_handler(own_transaction=True)
def start_graph(ctx: JobContext) -> dict:
    return graph_start(job_id=ctx.job_id)


@job_handler(own_transaction=True)
def run_task(ctx: JobContext) -> dict:
    with running_task_job(ctx):  # the task may check task_cancel_requested()
        return task_run_execute(
            task_run_id=int(ctx.payload["task_run_id"]),
            job_id=ctx.job_id,
            attempt=ctx.attempt,
            max_attempts=ctx.max_attempts,
        )


@job_handler
def rollback_graph(ctx: JobContext) -> dict:
    return graph_rollback(
        graph_run_id=int(ctx.payload["graph_run_id"]), last_attempt=ctx.is_last_attempt
    )
