"""Create demo members and a demo recurring task, then plan what is due."""

import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from tasksapp.recurring.models import Member, RecurringTask
from tasksapp.recurring.services import (
    PlanningInputError,
    member_create_many,
    plan_due_slices,
    recurring_task_create,
)

DEMO_HANDLER = "tasksapp.recurring.handlers.sync_member"


class Command(BaseCommand):
    help = "Create N demo members (phases given by TEMPO_PHASE_STRATEGY) and a recurring task."

    def add_arguments(self, parser):
        parser.add_argument("--count", type=int, default=1000, help="members to add")
        parser.add_argument("--batch", type=int, default=1000, help="members per transaction")
        parser.add_argument("--prefix", default="demo-", help="external_id prefix")
        parser.add_argument("--task", default="demo: sync profiles", help="recurring task name")
        parser.add_argument("--period-hours", type=float, default=24.0)
        parser.add_argument("--slices", type=int, default=24)
        parser.add_argument("--no-plan", action="store_true", help="do not run the planner")

    def handle(self, *args, **opts):
        if opts["count"] < 0 or opts["batch"] < 1:
            raise CommandError("--count must be >= 0 and --batch >= 1")
        try:
            self._ensure_task(opts)
            self._add_members(opts["count"], opts["batch"], opts["prefix"])
        except PlanningInputError as exc:
            raise CommandError(str(exc)) from exc
        if not opts["no_plan"]:
            summary = plan_due_slices()
            self.stdout.write(
                f"planned {summary.slices} slices: {summary.jobs} jobs, {summary.missed} missed"
            )

    def _ensure_task(self, opts) -> None:
        if RecurringTask.objects.filter(name=opts["task"]).exists():
            return
        recurring_task_create(
            name=opts["task"],
            handler=DEMO_HANDLER,
            slices=opts["slices"],
            period=dt.timedelta(hours=opts["period_hours"]),
        )
        self.stdout.write(f"created recurring task {opts['task']!r}")

    def _add_members(self, count: int, batch: int, prefix: str) -> None:
        number = Member.objects.filter(external_id__startswith=prefix).count()
        added = 0
        with tqdm(total=count, unit="members") as progress:
            while added < count:
                size = min(batch, count - added)
                names = [f"{prefix}{n:07d}" for n in range(number, number + size)]
                number += size
                taken = set(
                    Member.objects.filter(external_id__in=names).values_list(
                        "external_id", flat=True
                    )
                )
                created = member_create_many(external_ids=[n for n in names if n not in taken])
                added += len(created)
                progress.update(len(created))
