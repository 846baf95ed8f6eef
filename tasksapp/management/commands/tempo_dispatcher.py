"""`manage.py tempo_dispatcher`: one dispatcher instance (any number may run)."""

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from tasksapp.engine.dispatcher.loop import DispatcherLoop
from tasksapp.engine.worker.celery_app import broker_url, tempo_app


class Command(BaseCommand):
    help = "Run one dispatcher instance (any number may run; stop with SIGTERM or SIGINT)."

    def add_arguments(self, parser):
        parser.add_argument("--name", help="Instance name (default: host:pid).")

    def handle(self, *args, name=None, **options):
        try:
            broker_url(tempo_app())
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        DispatcherLoop(name=name).run()
