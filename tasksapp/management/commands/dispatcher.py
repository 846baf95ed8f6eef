from django.core.management.base import BaseCommand

from tasksapp.engine.dispatcher.loop import DispatcherLoop


class Command(BaseCommand):
    help = "Run one dispatcher instance (any number may run; stop with SIGTERM or SIGINT)."

    def add_arguments(self, parser):
        parser.add_argument("--name", help="Instance name (default: host:pid).")

    def handle(self, *args, name=None, **options):
        DispatcherLoop(name=name).run()
