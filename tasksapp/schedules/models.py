"""Calendar schedules: a handler run at the fire times of a cron in a time zone, or
every fixed interval; and one row per fire time decided (planned, caught up, skipped).

A fire time becomes at most one job: its idempotency key is
`schedule:<id>:<fire time in UTC, ISO 8601>`, and each (schedule, fire time) has at most
one ScheduleRun (a unique constraint), however many planners run.
"""

import datetime as dt

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from tasksapp.engine.models import Delivery


class Catchup(models.TextChoices):
    """What happens to fire times missed while nothing planned them (downtime, deploy)."""

    SKIP = "skip"  # none of them runs
    ONE = "one"  # the latest one within the window runs now
    ALL = "all"  # each one within the window runs now


class Overlap(models.TextChoices):
    """What a run does when the previous run has not finished at its start."""

    ALLOW = "allow"  # runs anyway
    SKIP = "skip"  # does not run (recorded as skipped)
    CANCEL_PREVIOUS = "cancel_previous"  # the previous run is cancelled, this one runs


class Schedule(models.Model):
    """A handler run at each fire time of `cron` in `timezone` (or every `every`), from
    `start_at` to `end_at`. Fire times up to `planned_until` are decided (their jobs
    created or their skip recorded); an edit applies from the next one after it."""

    name = models.CharField(max_length=100, unique=True)
    handler = models.CharField(max_length=200, help_text="A registered handler's name.")
    payload = models.JSONField(default=dict, blank=True)
    cron = models.CharField(max_length=200, blank=True, default="")
    every = models.DurationField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    jitter = models.DurationField(default=dt.timedelta(0), help_text="Runs start up to this late.")
    catchup = models.CharField(max_length=8, choices=Catchup, default=Catchup.ONE)
    catchup_window = models.DurationField(default=dt.timedelta(hours=1))
    overlap = models.CharField(max_length=16, choices=Overlap, default=Overlap.ALLOW)

    max_attempts = models.PositiveIntegerField(default=5)
    retry_policy = models.JSONField(default=dict, blank=True)
    delivery = models.CharField(max_length=16, choices=Delivery, default=Delivery.TRANSACTIONAL)
    time_limit = models.FloatField(null=True, blank=True, help_text="Seconds per attempt.")
    queue = models.CharField(max_length=64, default="default")
    priority = models.SmallIntegerField(default=5)
    concurrency_key = models.CharField(max_length=200, blank=True, default="")

    active = models.BooleanField(default=True)
    planned_until = models.DateTimeField(help_text="Fire times up to here are decided.")
    next_fire_at = models.DateTimeField(
        null=True, blank=True, help_text="The first fire time after planned_until (none: ended)."
    )
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # Serves the planner: the active schedules with a fire time to decide, and
            # only those (an hourly schedule is read once an hour, not every minute).
            models.Index(fields=["next_fire_at"], name="schedule_due_idx", condition=Q(active=True))
        ]
        constraints = [
            models.CheckConstraint(
                condition=(Q(cron="") & Q(every__isnull=False))
                | (~Q(cron="") & Q(every__isnull=True)),
                name="schedule_cron_xor_every",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=0, priority__lte=9), name="schedule_priority_0_9"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class RunOutcome(models.TextChoices):
    PLANNED = "planned"  # a job runs at the fire time
    CAUGHT_UP = "caught_up"  # missed, run late by the catch-up policy
    RUN_NOW = "run_now"  # an operator's extra run
    SKIPPED_MISSED = "skipped_missed"  # missed, not run (catch-up policy or window)
    SKIPPED_OVERLAP = "skipped_overlap"  # the previous run had not finished
    CANCELLED = "cancelled"  # its job was cancelled with the schedule's pause


class ScheduleRun(models.Model):
    """One fire time of a schedule, decided once: its job (if any) and what became of it."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    fire_at = models.DateTimeField()
    run_at = models.DateTimeField(null=True, blank=True, help_text="Its job's run time.")
    # The job's id, not a foreign key: retention removes finished jobs on its own.
    job_id = models.BigIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=RunOutcome)
    decided_at = models.DateTimeField(db_default=Now())
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["schedule", "fire_at"], name="schedule_run_unique")
        ]
        indexes = [models.Index(fields=["decided_at"], name="schedule_run_decided_idx")]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.fire_at.isoformat()} ({self.outcome})"


# The handler of a run whose schedule does not allow overlaps: it checks the previous
# run's state, then calls the schedule's handler (tasksapp.schedules.handlers).
GUARD_HANDLER = "tasksapp.schedules.guarded_run"
# What a fire's job key begins with: `schedule:<id>:`.
KEY_PREFIX = "schedule:{schedule_id}:"
