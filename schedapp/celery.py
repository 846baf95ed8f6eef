import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")

app = Celery("schedapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery tasks live in each feature's `tasks` module.
app.autodiscover_tasks(["tasksapp.engine.worker", "tasksapp.recurring"])


def _install_worker_steps() -> None:
    from tasksapp.engine.worker.wakeup import HubWakeup

    app.steps["worker"].add(HubWakeup)


_install_worker_steps()
