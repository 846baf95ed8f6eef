"""`manage.py tempo_beat`: Celery beat with django-celery-beat's database scheduler, which
sends Tempo's daily planner and retention run (and the project's own periodic tasks)."""

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from tasksapp.engine.worker.celery_app import broker_url, tempo_app

SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"


class Command(BaseCommand):
    help = "Run Celery beat with the database scheduler (one per deployment)."

    def add_arguments(self, parser):
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, loglevel, **options):
        app = tempo_app()
        try:
            broker_url(app)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        app.start(["beat", "--scheduler", SCHEDULER, "--loglevel", loglevel])
