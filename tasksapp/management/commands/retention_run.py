"""Roll up finished jobs, then remove what is past its age, now, with a progress bar."""

from django.core.management.base import BaseCommand
from django.utils import timezone
from tqdm import tqdm

from tasksapp.retention.selectors import retention_backlog
from tasksapp.retention.services import retention_run, rollup_write


class Command(BaseCommand):
    help = "Run retention now (what beat runs every 5 minutes): rollups, then removal."

    def handle(self, *args, **opts):
        now = timezone.now()
        rollup_write(now=now)
        with tqdm(total=retention_backlog(now=now), unit="jobs") as bar:

            def progress(kind: str, removed: int) -> None:
                if kind == "jobs":
                    bar.update(removed)
                else:
                    bar.set_postfix_str(kind)

            report = retention_run(now=now, progress=progress)
        self.stdout.write(f"rolled up until {report.rolled_until:%Y-%m-%d %H:%M:%S}")
        for kind, count in report.removed.items():
            self.stdout.write(f"removed {count} {kind.replace('_', ' ')}")
