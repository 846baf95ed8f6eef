"""Celery tasks of recurring work: thin adapters over services."""

from celery import shared_task

from tasksapp.recurring.services import audience_sync_all, plan_due_slices

PLAN_DUE_SLICES = "tasksapp.plan_due_slices"
AUDIENCE_SYNC = "tasksapp.audience_sync"


@shared_task(name=PLAN_DUE_SLICES, ignore_result=True)
def plan_due_slices_task() -> dict:
    """The daily planner (django-celery-beat): plan every slice that is due."""
    return plan_due_slices().as_dict()


@shared_task(name=AUDIENCE_SYNC, ignore_result=True)
def audience_sync_task() -> dict:
    """The audiences' timer (django-celery-beat): members follow every task's audience."""
    return {name: done.joined - done.left for name, done in audience_sync_all().items()}
