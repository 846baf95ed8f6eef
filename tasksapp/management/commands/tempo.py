"""`manage.py tempo <group> <command>`: operators' commands (jobs list|show|retry|cancel|
run-now, queues pause|resume, ...). Each subcommand is one function in
tasksapp/management/tempo_cli/ (its __init__ says how to add one)."""

from django.core.management.base import BaseCommand

from tasksapp.management.tempo_cli import add_subcommands


class Command(BaseCommand):
    help = (
        "Operate Tempo from a shell: list and show jobs; retry, cancel or run now every job a"
        " filter matches (recorded in the audit log); pause and resume queues."
    )

    def add_arguments(self, parser):
        add_subcommands(parser)

    def handle(self, *args, **options):
        status = options["subcommand"].run(self, options)
        if status:
            raise SystemExit(status)
