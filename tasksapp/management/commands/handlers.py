"""List the registered job handlers and the waiting jobs whose handler is not registered."""

from django.core.management.base import BaseCommand, CommandError

from tasksapp.engine.checks import unregistered_waiting_handlers
from tasksapp.engine.handlers import handler_modules, registry


class Command(BaseCommand):
    help = (
        "List the job handlers this process registers (and the modules they come from), "
        "and report jobs still to run whose handler is not registered (exit status 1)."
    )

    def handle(self, *args, **options):
        self.stdout.write("Handler modules: " + ", ".join(handler_modules()))
        for name in registry:
            self.stdout.write(f"  {name}")
        missing = unregistered_waiting_handlers()
        if not missing:
            self.stdout.write(self.style.SUCCESS("Every waiting job's handler is registered."))
            return
        for name, jobs in missing.items():
            self.stderr.write(f"  not registered: {name} ({jobs} waiting jobs)")
        raise CommandError(
            f"{sum(missing.values())} waiting jobs name {len(missing)} unregistered handlers."
        )
