"""The Celery app that carries Tempo's messages: the project's own when it has one, Tempo's
otherwise.

A Django project with Celery makes its app when its package is imported (the usual
`proj/celery.py`, imported by `proj/__init__.py`), configured from its `CELERY_*`
settings: Tempo's dispatchers publish with that app and its workers run on it, beside the
project's own tasks. `TEMPO_CELERY_APP` ("proj.celery.app") names the app when it is not
the current one. A project without Celery gets Tempo's own app, configured from the same
`CELERY_*` settings. Either way Tempo adds its part to the app once (`tempo_app`): its
tasks, the route of its beat tasks to the workers' queue and the worker steps that wake
the event loop (tasksapp.engine.worker.wakeup).
"""

from __future__ import annotations

import threading
from importlib import import_module

from celery import Celery
from celery import _state as celery_state
from celery.signals import worker_init
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

# Tempo's Celery tasks: the workers' batches, the daily planner, the retention run, the
# schedule planner, the alerts' evaluator.
TASK_MODULES = (
    "tasksapp.alerts.tasks",
    "tasksapp.engine.worker.tasks",
    "tasksapp.recurring.tasks",
    "tasksapp.retention.tasks",
    "tasksapp.schedules.tasks",
)
OWN_APP_NAME = "tempo"
DB_REUSE_MAX = 1_000_000  # connections closed only by close_old_connections (CONN_MAX_AGE)
ERR_APP_SETTING = "TEMPO_CELERY_APP must name a Celery app ('proj.celery.app'): {reason}."
ERR_NO_BROKER = (
    "Tempo needs a message broker: set CELERY_BROKER_URL (for example "
    "redis://localhost:6379/0), or the broker_url of your Celery app."
)

_lock = threading.Lock()
_app: Celery | None = None


def tempo_app() -> Celery:
    """This process's Celery app for Tempo, with Tempo's part added (once)."""
    global _app
    with _lock:
        if _app is None:
            _app = _with_tempo(_project_app() or _own_app())
        return _app


def broker_url(app: Celery) -> str:
    """The app's broker URL; ImproperlyConfigured if none is set (Celery would otherwise
    try amqp://localhost and retry forever)."""
    url = app.conf.broker_url or getattr(settings, "CELERY_BROKER_URL", "")
    if not url:
        raise ImproperlyConfigured(ERR_NO_BROKER)
    return url


def _project_app() -> Celery | None:
    """The app `TEMPO_CELERY_APP` names, else the project's current app, if any."""
    path = getattr(settings, "TEMPO_CELERY_APP", "")
    if path:
        try:
            app = import_string(path.replace(":", "."))
        except ImportError as exc:
            raise ImproperlyConfigured(ERR_APP_SETTING.format(reason=exc)) from exc
        if not isinstance(app, Celery):
            reason = f"{path} is a {type(app).__name__}"
            raise ImproperlyConfigured(ERR_APP_SETTING.format(reason=reason))
        return app
    current = celery_state._tls.current_app  # set by the project's Celery(...), if any
    return current if isinstance(current, Celery) else None


def _own_app() -> Celery:
    """Tempo's app, configured from the project's CELERY_* settings. Unless the project
    says otherwise, a task keeps the worker's database connections (Celery's Django
    fixup would close them all after every task: a new connection for every batch)."""
    app = Celery(OWN_APP_NAME, set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    if getattr(settings, "CELERY_DB_REUSE_MAX", None) is None:
        app.conf["CELERY_DB_REUSE_MAX"] = DB_REUSE_MAX
    return app


def _with_tempo(app: Celery) -> Celery:
    for module in TASK_MODULES:  # shared tasks: registered with every app
        import_module(module)
    routes = app.conf.task_routes
    if routes is None:
        mine: tuple = (route_to_tempo_queue,)
    elif isinstance(routes, list | tuple):
        mine = (route_to_tempo_queue, *[r for r in routes if r is not route_to_tempo_queue])
    else:  # one router (a dict or a function) of the project's
        mine = (route_to_tempo_queue, routes)
    app.conf.task_routes = mine
    _install_worker_steps(app)
    return app


def route_to_tempo_queue(name, args, kwargs, options, task=None, **kw):
    """Tempo's tasks sent without a queue (beat's daily planner, the retention run) go to
    the queue its workers consume (`TEMPO["QUEUE"]`); other tasks are not Tempo's."""
    if not name.startswith("tasksapp."):
        return None
    from tasksapp.engine.settings import tempo_settings

    return {"queue": tempo_settings().queue}


def _install_worker_steps(app: Celery) -> None:
    from tasksapp.engine.worker.polling_loop import PollingLoop
    from tasksapp.engine.worker.wakeup import HubWakeup, HubWakeupReader

    app.steps["worker"].add(HubWakeup)
    app.steps["consumer"].add(HubWakeupReader)
    app.steps["consumer"].add(PollingLoop)


@worker_init.connect
def _add_to_started_worker(sender=None, **kwargs) -> None:
    """A worker started with `celery -A proj worker` on an app Tempo was not given (made
    after start-up, or not the current one): Tempo's part is added before its steps are
    read."""
    app = getattr(sender, "app", None)
    if isinstance(app, Celery) and app is not _app:
        _with_tempo(app)
