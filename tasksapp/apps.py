from django.apps import AppConfig


class TasksappConfig(AppConfig):
    name = "tasksapp"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every process (web, dispatcher, worker, commands) knows the same graph tasks,
        # so a plan made when a job is scheduled holds where its tasks run.
        from tasksapp.graphs.registry import autodiscover_graph_tasks
        from tasksapp.web import admin  # noqa: F401  (registers the admin pages)

        autodiscover_graph_tasks()
