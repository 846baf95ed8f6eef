import uuid

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class JobState(models.TextChoices):
    SCHEDULED = "scheduled"  # waiting for its run time
    CLAIMED = "claimed"  # a dispatcher took it and sent it to a worker
    RUNNING = "running"  # a worker started its handler
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # an attempt failed; the next one is due at run_at
    DEAD = "dead"  # out of attempts
    CANCELLED = "cancelled"
    LOST = "lost"  # at-most-once job whose worker died: an operator decides


# States a dispatcher may claim; states whose lease the reaper watches.
DUE_STATES = (JobState.SCHEDULED, JobState.FAILED)
LEASED_STATES = (JobState.CLAIMED, JobState.RUNNING)
# What an operator may retry: ended without success, or failed and waiting for a retry.
RETRYABLE_STATES = (JobState.DEAD, JobState.LOST, JobState.CANCELLED, JobState.FAILED)
FINAL_STATES = (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED, JobState.LOST)
# Jobs not in flight: the condition of the indexes a claim and a start need not write.
NOT_LEASED = ~Q(state__in=LEASED_STATES)


class Delivery(models.TextChoices):
    # Handler and success commit in one transaction: database effects happen exactly once.
    TRANSACTIONAL = "transactional"
    # Runs again after a lost worker, with the same idempotency key.
    AT_LEAST_ONCE = "at_least_once"
    # Never runs again by itself after a lost worker: the job becomes `lost`.
    AT_MOST_ONCE = "at_most_once"


def new_idempotency_key() -> str:
    return uuid.uuid4().hex


class Job(models.Model):
    handler = models.CharField(max_length=200, help_text="Dotted path to a callable.")
    payload = models.JSONField(default=dict, blank=True)
    run_at = models.DateTimeField()
    created_at = models.DateTimeField(db_default=Now())
    claimed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the handler began.")
    finished_at = models.DateTimeField(null=True, blank=True)

    state = models.CharField(max_length=16, choices=JobState, default=JobState.SCHEDULED)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=5)
    retry_policy = models.JSONField(default=dict, blank=True)
    delivery = models.CharField(max_length=16, choices=Delivery, default=Delivery.TRANSACTIONAL)
    time_limit = models.FloatField(null=True, blank=True, help_text="Seconds per attempt.")
    # Unique through a constraint in Meta, not `unique=True`: on PostgreSQL that would add
    # a second, pattern-matching index of every key, written by every claim, start and
    # finish and read by nothing.
    idempotency_key = models.CharField(max_length=200, default=new_idempotency_key)
    # Routing (tasksapp.engine.options): the queue (its limits, its Celery queue), the
    # priority (0-9, higher claimed first) and the key its queue's per-key limit counts.
    queue = models.CharField(max_length=64, default="default", db_default="default")
    priority = models.SmallIntegerField(default=5, db_default=5)
    concurrency_key = models.CharField(max_length=200, blank=True, default="", db_default="")

    # Fencing token: increases at every claim; every later transition must match it.
    lease_token = models.BigIntegerField(default=0)
    claimed_by = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    last_error = models.TextField(blank=True, default="")
    errors = models.JSONField(default=list, blank=True, help_text="One entry per failed attempt.")
    result = models.JSONField(null=True, blank=True)

    # Set by job_cancel on a claimed or running job: its worker ends it `cancelled`.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # What happened besides failed attempts (snoozes), oldest first; NULL: nothing yet.
    history = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [
            # Serves the dispatcher's poll exactly: due work ordered by run time.
            models.Index(
                fields=["run_at"],
                name="job_due_idx",
                condition=Q(state__in=["scheduled", "failed"]),
            ),
            # Serves the reaper: leases of claimed and running jobs.
            models.Index(
                fields=["lease_expires_at"],
                name="job_lease_idx",
                condition=Q(state__in=["claimed", "running"]),
            ),
            # The dashboard's reads by state and by handler (with job_run_at_id_idx,
            # migration 0019). Jobs in flight are left out: a claim or a start writes no
            # entry in them, and those few jobs are read through job_lease_idx.
            models.Index(
                fields=["state", "run_at"], name="job_state_run_at_idx", condition=NOT_LEASED
            ),
            models.Index(
                fields=["handler", "run_at"], name="job_handler_run_at_idx", condition=NOT_LEASED
            ),
            # Serves a limited queue's claim: its claimed and running jobs, per key.
            models.Index(
                fields=["queue", "concurrency_key"],
                name="job_active_queue_idx",
                condition=Q(state__in=["claimed", "running"]),
            ),
        ]
        constraints = [
            # The name of the unique constraint `unique=True` made: the same index.
            models.UniqueConstraint(
                fields=["idempotency_key"], name="tasksapp_job_idempotency_key_key"
            ),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="job_attempts_gte_0"),
            models.CheckConstraint(condition=Q(max_attempts__gte=1), name="job_max_attempts_gte_1"),
            models.CheckConstraint(
                condition=Q(priority__gte=0, priority__lte=9), name="job_priority_0_9"
            ),
        ]

    def __str__(self) -> str:
        return f"Job {self.pk} {self.handler} ({self.state})"


class JobSearchText(models.Model):
    """A job's idempotency key and payload as text, for the job list's search: written
    once, by triggers, when the job is inserted (neither changes after that), so that the
    trigram indexes over them are not written again at every version of the job.
    PostgreSQL's alone (migration 0028, decision 0024); SQLite searches the jobs table."""

    job_id = models.BigIntegerField(primary_key=True)
    idempotency_key = models.TextField()
    payload = models.TextField()

    class Meta:
        managed = False  # the table, its indexes and its triggers are migration 0028's
        db_table = "tasksapp_job_search"

    def __str__(self) -> str:
        return f"Search text of job {self.job_id}"
