"""Celery tasks of recurring work: thin adapters over services."""

from celery import shared_task

from tasksapp.recurring.services import plan_due_slices

PLAN_DUE_SLICES = "tasksapp.plan_due_slices"


@shared_task(name=PLAN_DUE_SLICES, ignore_result=True)
def plan_due_slices_task() -> dict:
    """The daily planner (django-celery-beat): plan every slice that is due."""
    return plan_due_slices().as_dict()
