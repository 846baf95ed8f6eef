"""Celery tasks: thin adapters over services."""

from celery import shared_task

from tasksapp.executor import execute_batch

RUN_JOBS = "tasksapp.run_jobs"


@shared_task(name=RUN_JOBS, ignore_result=True, acks_late=False)
def run_jobs(claims: list[list[int]]) -> int:
    """Run a batch of claimed jobs: [[job id, fencing token, run_at ms], ...]."""
    return execute_batch(claims)
