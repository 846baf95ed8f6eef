"""The standalone deployment's Celery app, made as any Django project makes its own: Tempo
runs its workers on it and adds its tasks, routes and worker steps
(tasksapp.engine.worker.celery_app)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")

app = Celery("schedapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
