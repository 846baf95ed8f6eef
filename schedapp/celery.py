import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")

app = Celery("schedapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _install_worker_steps() -> None:
    from tasksapp.worker_wakeup import HubWakeup

    app.steps["worker"].add(HubWakeup)


_install_worker_steps()
