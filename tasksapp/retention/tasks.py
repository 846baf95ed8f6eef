"""Celery tasks of retention: thin adapters over services."""

from celery import shared_task

from tasksapp.retention.services import retention_run

RETENTION_RUN = "tasksapp.retention_run"


@shared_task(name=RETENTION_RUN, ignore_result=True)
def retention_run_task() -> dict:
    """Every 5 minutes (django-celery-beat): roll up, then remove what is past its age."""
    return retention_run().as_dict()
