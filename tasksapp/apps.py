from django.apps import AppConfig


class TasksappConfig(AppConfig):
    name = "tasksapp"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every process (web, dispatcher, worker, commands) knows the same handlers, graph
        # tasks and Tasks-API tasks, so what is accepted when a job is scheduled runs
        # where it runs.
        from tasksapp import backends
        from tasksapp.engine import checks  # noqa: F401  (registers the system checks)
        from tasksapp.engine.handlers import load_handler_modules
        from tasksapp.engine.worker.celery_app import tempo_app
        from tasksapp.graphs import runner  # noqa: F401  (registers the graph jobs' handlers)
        from tasksapp.graphs.registry import autodiscover_graph_tasks
        from tasksapp.recurring import checks as _checks  # noqa: F401  (audiences' database)
        from tasksapp.schedules import handlers as _  # noqa: F401  (the overlap guard's handler)
        from tasksapp.web import (  # noqa: F401  (the admin pages)
            admin,
            admin_alerts,
            admin_schedules,
        )

        load_handler_modules()
        autodiscover_graph_tasks()
        backends.load_task_modules()
        tempo_app()  # Tempo's tasks, routes and worker steps on the project's Celery app
