from django.apps import AppConfig


class TasksappConfig(AppConfig):
    name = "tasksapp"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"
