"""Rollups of finished jobs: per span (a minute or an hour), handler, recurring task and
state, the counts, attempts, failures and a start-lag histogram. They outlive the rows
they were made from, so the overview's charts and a recurring task's history reach back
further than the jobs table."""

from django.db import models
from django.db.models.functions import Now

# Upper bounds (ms) of the start-lag histogram's buckets; one more bucket holds the rest.
LAG_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000)
LAG_FIELDS = tuple(f"lag_b{i:02d}" for i in range(len(LAG_BOUNDS_MS) + 1))

MINUTE = 60
HOUR = 3600
SPANS = (MINUTE, HOUR)


class JobRollup(models.Model):
    """Jobs that finished within [bucket, bucket + span): one row per handler, recurring
    task (0 for none) and state. `lag_bNN` counts the starts whose lag fell in bucket NN
    (`LAG_BOUNDS_MS`), for succeeded and dead jobs, as the dashboard's lag."""

    span = models.PositiveIntegerField(help_text="Seconds: 60 or 3600.")
    bucket = models.DateTimeField()
    handler = models.CharField(max_length=200)
    task_id = models.BigIntegerField(default=0, help_text="Recurring task, 0 for none.")
    state = models.CharField(max_length=16)
    jobs = models.BigIntegerField(default=0)
    attempts = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(default=0, help_text="Failed attempts (error entries).")
    retried = models.BigIntegerField(default=0, help_text="Jobs that needed more than one.")
    lag_count = models.BigIntegerField(default=0)
    lag_sum_ms = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["span", "bucket", "handler", "task_id", "state"], name="job_rollup_key"
            )
        ]
        indexes = [
            models.Index(fields=["span", "task_id", "bucket"], name="job_rollup_task_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.span}s {self.bucket:%Y-%m-%d %H:%M} {self.handler} {self.state}"


for _name in LAG_FIELDS:
    JobRollup.add_to_class(_name, models.BigIntegerField(default=0))


class RollupMark(models.Model):
    """How far finished jobs were rolled up: every job that finished before `until` is in
    the rollups. One row; retention removes only jobs that finished before it."""

    until = models.DateTimeField()
    updated_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"rolled up until {self.until:%Y-%m-%d %H:%M:%S}"
