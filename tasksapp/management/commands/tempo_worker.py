"""`manage.py tempo_worker`: a Celery worker for Tempo's jobs, on the project's Celery app
(or Tempo's own), consuming the Celery queues of the Tempo queues it serves."""

import os

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from tasksapp.engine.options import JobOptionsError, validated_queue
from tasksapp.engine.settings import DEFAULT_QUEUE, tempo_settings
from tasksapp.engine.worker.celery_app import broker_url, tempo_app

POOLS = ("threads", "prefork", "solo")


def served_queues(given: str | None) -> list[str]:
    """The Tempo queues to serve: those given (comma-separated), else the default queue
    and the QUEUES of the project's Tempo task backends."""
    if given:
        names = [name.strip() for name in given.split(",") if name.strip()]
    else:
        from django.conf import settings

        from tasksapp.backends import tempo_backend_aliases

        tasks = getattr(settings, "TASKS", None) or {}
        names = [DEFAULT_QUEUE]
        for alias in tempo_backend_aliases():
            names += list(tasks[alias].get("QUEUES", []))
    try:
        return list(dict.fromkeys(validated_queue(name) for name in names))
    except JobOptionsError as exc:
        raise CommandError(f"--queues: {exc}") from exc


class Command(BaseCommand):
    help = "Run a worker for Tempo's jobs (stop with SIGTERM or SIGINT)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--queues",
            help="Tempo queues to serve, comma-separated (default: 'default' and the "
            "QUEUES of the Tempo task backends).",
        )
        parser.add_argument("--pool", choices=POOLS, default="threads")
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--loglevel", default="INFO")
        parser.add_argument("--hostname", help="Celery node name (default: tempo-<pid>@<host>).")

    def handle(self, *args, queues, pool, concurrency, loglevel, hostname, **options):
        app = tempo_app()
        try:
            broker_url(app)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        settings = tempo_settings()
        celery_queues = [settings.celery_queue(name) for name in served_queues(queues)]
        argv = ["worker", "-Q", ",".join(celery_queues), "-P", pool, "-c", str(concurrency)]
        argv += ["--loglevel", loglevel, "--prefetch-multiplier", "1"]
        argv += ["--hostname", hostname or f"tempo-{os.getpid()}@%h"]  # one name each
        app.worker_main(argv)
