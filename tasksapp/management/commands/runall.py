"""Run the whole service from one terminal: migrate, make sure an admin user exists, run
web, dispatcher, worker and beat as child processes, and load the demo jobs once the
dispatcher and the worker are up (jobs due in its first seconds would otherwise wait for
them to start, and the dashboard would open on seconds of start lag); run until
SIGINT/SIGTERM (forwarded to each child) or until one of them exits by itself.

A generated admin password is printed when it is made and again once everything runs, and
kept in `<data dir>/admin-password`, readable by its owner only."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections
from django.utils import timezone

from tasksapp.engine.models import Dispatcher, WorkerProcess
from tasksapp.engine.settings import TempoSettings

BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
STOP_TIMEOUT_SECONDS = 30
ANNOUNCE_AFTER_SECONDS = 5.0  # print the URL below the start-up banners of the children
# The demo is loaded once a dispatcher and a worker have beaten, or after this long anyway.
DEMO_WAITS_AT_MOST_SECONDS = 120.0
# The demo graph tasks' simulated calls sleep 1-5 s times this: 10-50 ms. A graph task is
# transactional, and on SQLite a transactional job holds the only write lock while its
# handler runs: at 0.3 the graph demo held up every other demo job for seconds, at 0.05
# for up to a second.
DEMO_GRAPH_LATENCY_SCALE = 0.01
ERR_PORT_IN_USE = "port {port} is already in use: stop what runs there or pass --port"
ERR_CHILD_EXITED = "{name} exited unexpectedly (code {code}); the other processes were stopped"
PASSWORD_FILE = "admin-password"  # in settings.DATA_DIR, mode 0600
RESET_HINT = "change it: ./bin/manage changepassword admin"
# The embedded worker runs handlers in threads (one process tree); a thread cannot be
# stopped from outside (docs/decisions/0013-time-limits-by-watchdog.md).
THREADS_NOTE = (
    "  worker: threads pool. A handler past its time limit is recorded as failed, but its\n"
    "  thread runs on until the handler returns; for handlers that may hang, run prefork\n"
    "  workers (docker compose), which end them."
)


def child_commands(*, port: int) -> dict[str, list[str]]:
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
    celery = [sys.executable, "-m", "celery", "-A", "schedapp"]
    queue = TempoSettings.load().queue
    return {
        "web": [*manage, "runserver", f"127.0.0.1:{port}", "--noreload"],
        "dispatcher": [*manage, "dispatcher"],
        "worker": [*celery, *f"worker -Q {queue} -P threads -c 4 --loglevel=INFO".split()],
        "beat": [*celery, *f"beat --loglevel=INFO --scheduler {BEAT_SCHEDULER}".split()],
    }


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable and writable by its owner only (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)  # a file there before keeps its mode otherwise
        out.write(text + "\n")


def engine_up(since: dt.datetime) -> bool:
    """Whether a dispatcher and a worker have beaten since `since`."""
    return (
        Dispatcher.objects.filter(heartbeat_at__gte=since, stopped_at__isnull=True).exists()
        and WorkerProcess.objects.filter(heartbeat_at__gte=since).exists()
    )


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


class Command(BaseCommand):
    help = "Run web, dispatcher, worker and beat together (the embedded default of bin/run)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="Web port (127.0.0.1).")
        parser.add_argument("--no-demo", action="store_true", help="Do not load demo jobs.")

    def handle(self, *args, port, no_demo, **options):
        if port_open(port):
            raise CommandError(ERR_PORT_IN_USE.format(port=port))
        self._prepare_folders()
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        login = self._ensure_admin()
        connections.close_all()  # the children open their own
        self.signum: int | None = None
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        children = self._start(port)
        exited = self._watch(children, port=port, login=login, demo=not no_demo)
        self._stop(children, self.signum or signal.SIGTERM)
        if exited:
            code = children[exited].returncode
            raise CommandError(ERR_CHILD_EXITED.format(name=exited, code=code))

    def _prepare_folders(self) -> None:
        Path(settings.DATA_DIR).mkdir(parents=True, exist_ok=True)
        options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
        for key in ("data_folder_in", "data_folder_out", "processed_folder"):
            if options.get(key):  # the filesystem broker's folders
                Path(options[key]).mkdir(parents=True, exist_ok=True)

    def _ensure_admin(self) -> str:
        """Create superuser `admin` if there is no superuser; return how to log in. A
        generated password is also written to PASSWORD_FILE and printed at once."""
        users = get_user_model().objects
        kept = Path(settings.DATA_DIR) / PASSWORD_FILE
        if users.filter(is_superuser=True).exists():
            if kept.exists():
                return f"user admin, password as generated in {kept} ({RESET_HINT})"
            return f"an admin user exists already ({RESET_HINT})"
        given = os.environ.get("TEMPO_ADMIN_PASSWORD")
        password = given or secrets.token_urlsafe(12)
        users.create_superuser(username="admin", email="", password=password)
        if given:
            return "user admin, password from TEMPO_ADMIN_PASSWORD"
        write_private(kept, password)
        login = f"user admin, password {password}  (generated; kept in {kept})"
        self.stdout.write(f"admin login: {login}")
        return login

    def _on_signal(self, signum, frame) -> None:
        self.signum = signum

    def _start(self, port: int) -> dict[str, subprocess.Popen]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # Own process groups: a Ctrl-C in the terminal reaches this process only, which
        # forwards it once to each child.
        return {
            name: subprocess.Popen(
                command, cwd=settings.BASE_DIR, env=env, stdin=subprocess.DEVNULL, process_group=0
            )
            for name, command in child_commands(port=port).items()
        }

    def _watch(
        self, children: dict[str, subprocess.Popen], *, port: int, login: str, demo: bool
    ) -> str | None:
        """Wait for a signal (returns None) or a child's exit (returns its name); print how
        to log in once the web answers, and load the demo once the engine is up."""
        announced, started, since = False, time.monotonic(), timezone.now()
        while self.signum is None:
            for name, child in children.items():
                if child.poll() is not None:
                    return name
            waited = time.monotonic() - started
            if demo and (engine_up(since) or waited > DEMO_WAITS_AT_MOST_SECONDS):
                demo = False
                call_command("load_demo")
                call_command("load_graph_demo", latency_scale=DEMO_GRAPH_LATENCY_SCALE)
                connections.close_all()
            if not announced and waited > ANNOUNCE_AFTER_SECONDS and port_open(port):
                announced = True
                self.stdout.write(self.style.SUCCESS(f"\nTempo runs at http://127.0.0.1:{port}/"))
                self.stdout.write(f"  admin login: {login}\n{THREADS_NOTE}\n  stop with Ctrl-C\n")
                self.stdout.flush()
            time.sleep(0.2)
        return None

    def _stop(self, children: dict[str, subprocess.Popen], signum: int) -> None:
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signum)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for name, child in children.items():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop within {STOP_TIMEOUT_SECONDS} s: killed")
                child.kill()
                child.wait()
        self.stdout.write("all processes stopped")
