from django.db import migrations
from django.utils import timezone

PLANNER_NAME = "tempo: plan due slices"
PLANNER_TASK = "tasksapp.plan_due_slices"  # tasksapp.recurring.tasks.PLAN_DUE_SLICES


def install(apps, schema_editor):
    """The daily planner run: at 00:00 UTC, and once as soon as beat first starts
    (a start time in the past makes django-celery-beat run it at once)."""
    crontab_model = apps.get_model("django_celery_beat", "CrontabSchedule")
    periodic_task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    crontab, _ = crontab_model.objects.get_or_create(
        minute="0",
        hour="0",
        day_of_week="*",
        day_of_month="*",
        month_of_year="*",
        timezone="UTC",
    )
    periodic_task_model.objects.get_or_create(
        name=PLANNER_NAME,
        defaults={
            "task": PLANNER_TASK,
            "crontab": crontab,
            "start_time": timezone.now(),
            "description": "Plans each recurring task's due slices of members into jobs "
            "(docs/PLANNING.md). Running it more often is harmless.",
        },
    )


def remove(apps, schema_editor):
    periodic_task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    periodic_task_model.objects.filter(name=PLANNER_NAME).delete()


class Migration(migrations.Migration):
    """A fresh install plans recurring tasks without any manual setup."""

    dependencies = [
        ("tasksapp", "0003_planning"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(install, remove)]
