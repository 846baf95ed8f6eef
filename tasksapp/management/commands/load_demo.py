"""Schedule demo jobs spread over the next minutes. Every job has an idempotency key made
of the batch name and its number, so loading the same batch twice adds nothing."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter

from django.core.management.base import BaseCommand
from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.models import Delivery, Job
from tasksapp.engine.services import job_schedule
from tasksapp.schedules.models import Schedule
from tasksapp.schedules.services import schedule_create

GREET, FLAKY = "tasksapp.demo.handlers.greet", "tasksapp.demo.handlers.flaky"
RETRY_POLICY = {"delays": [1, 2, 5, 10, 20]}
FIRST_JOBS = 20  # due within the first few seconds, so something happens at once
NAMES = ["Ada", "Grace", "Linus", "Barbara", "Guido", "Margaret", "Ken", "Radia"]
# Calendar schedules to look at: one every 30 s of elapsed time, one a cron in a zone.
DEMO_SCHEDULES = [
    {"name": "demo: greet every 30 s", "every": dt.timedelta(seconds=30)},
    {"name": "demo: nightly greeting (Berlin)", "cron": "30 2 * * *", "timezone": "Europe/Berlin"},
]


def _kind(n: int) -> dict:
    """Job n's handler and options: 2 in 5 are flaky, the rest greet."""
    if n % 5 in (3, 4):
        rate = 1.0 if n % 50 == 49 else 0.2  # every 50th always fails: its retries run out
        return dict(handler=FLAKY, payload={"fail_rate": rate}, delivery=Delivery.AT_LEAST_ONCE)
    delivery = Delivery.AT_MOST_ONCE if n % 5 == 2 else Delivery.TRANSACTIONAL
    return dict(handler=GREET, payload={"name": NAMES[n % len(NAMES)]}, delivery=delivery)


def demo_jobs(*, now: dt.datetime, count: int, seconds: float, batch: str) -> list[dict]:
    """The keyword arguments of `job_schedule` for each demo job."""
    rng = random.Random(batch)
    jobs = []
    for n in range(count):
        offset = 1 + n * 0.2 if n < FIRST_JOBS else rng.uniform(5, max(5.0, seconds))
        jobs.append(
            {
                **_kind(n),
                "run_at": now + dt.timedelta(seconds=offset),
                "idempotency_key": f"demo:{batch}:{n:04d}",
                "retry_policy": RETRY_POLICY,
                "max_attempts": 5,
            }
        )
    return jobs


class Command(BaseCommand):
    help = "Schedule a few hundred demo jobs over the next minutes (safe to run again)."

    def add_arguments(self, parser):
        parser.add_argument("--count", type=int, default=300, help="Jobs to schedule.")
        parser.add_argument(
            "--seconds",
            type=float,
            default=300.0,
            help="Spread them over this many seconds from now.",
        )
        parser.add_argument(
            "--batch",
            default="1",
            help="Batch name in the idempotency keys; a new name adds new jobs.",
        )

    def handle(self, *args, count, seconds, batch, **options):
        jobs = demo_jobs(now=timezone.now(), count=count, seconds=seconds, batch=batch)
        keys = [job["idempotency_key"] for job in jobs]
        existing = Job.objects.filter(idempotency_key__in=keys).count()
        with tempo_atomic():
            for job in jobs:
                job_schedule(**job)
        kinds = Counter(job["handler"].rsplit(".", 1)[1] for job in jobs)
        summary = ", ".join(f"{name} {n}" for name, n in sorted(kinds.items()))
        new = len(jobs) - existing
        when = f"due over the next {seconds:g} s" if new else "another --batch adds new ones"
        self.stdout.write(f"demo batch {batch!r}: {len(jobs)} jobs ({summary}), {new} new, {when}")
        made = demo_schedules()
        self.stdout.write(f"demo schedules: {len(DEMO_SCHEDULES)} ({made} new)")


def demo_schedules() -> int:
    """The demo's calendar schedules not there yet, made; how many were made."""
    made = 0
    for options in DEMO_SCHEDULES:
        if not Schedule.objects.filter(name=options["name"]).exists():
            schedule_create(handler=GREET, payload={"name": "Schedule"}, **options)
            made += 1
    return made
