"""Celery task of alerts: a thin adapter over the evaluator."""

from celery import shared_task

from tasksapp.alerts.services import alerts_evaluate

ALERTS_EVALUATE = "tasksapp.alerts_evaluate"


@shared_task(name=ALERTS_EVALUATE, ignore_result=True)
def alerts_evaluate_task() -> dict:
    """Every minute (django-celery-beat): open, resolve and notify incidents."""
    return alerts_evaluate().as_dict()
