import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")

app = Celery("schedapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery tasks live in each feature's `tasks` module.
app.autodiscover_tasks(["tasksapp.engine.worker", "tasksapp.recurring", "tasksapp.retention"])


def _route_to_tempo_queue(name, args, kwargs, options, task=None, **kw):
    """The app's tasks sent without a queue — beat's daily planner — go to the queue the
    workers consume (`TEMPO_QUEUE`): Celery's default queue, "celery", has no consumer."""
    if not name.startswith("tasksapp."):
        return None
    from django.conf import settings

    return {"queue": settings.TEMPO["QUEUE"]}


app.conf.task_routes = (_route_to_tempo_queue,)


def _install_worker_steps() -> None:
    from tasksapp.engine.worker.wakeup import HubWakeup, HubWakeupReader

    app.steps["worker"].add(HubWakeup)
    app.steps["consumer"].add(HubWakeupReader)


_install_worker_steps()
