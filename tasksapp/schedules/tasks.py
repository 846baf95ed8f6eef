"""Celery tasks of schedules: thin adapters over services."""

from celery import shared_task

from tasksapp.schedules.services import schedule_runs_prune, schedules_plan_due

PLAN_SCHEDULES = "tasksapp.plan_schedules"


@shared_task(name=PLAN_SCHEDULES, ignore_result=True)
def plan_schedules_task() -> dict:
    """Every minute (django-celery-beat): plan each schedule's fires up to the horizon,
    then remove runs past their age."""
    return schedules_plan_due().as_dict() | {"runs_removed": schedule_runs_prune()}
