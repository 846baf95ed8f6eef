"""Alert rules and their incidents."""

import datetime as dt

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class AlertKind(models.TextChoices):
    # At least `threshold` jobs of a handler went dead within the window.
    DEAD_JOBS = "dead_jobs", "Dead jobs per handler"
    # A queue's oldest due job has waited more than `threshold` seconds.
    OLDEST_DUE = "oldest_due", "Age of the oldest due job"
    # The 95th percentile of start lag (started_at - run_at) of a queue's jobs started
    # within the window is above `threshold` seconds.
    START_LAG = "start_lag", "Start lag (p95)"
    # A queue has had due work for more than `threshold` seconds and no live worker.
    NO_WORKER = "no_worker", "Due work and no worker"
    # A dispatcher not stopped has not beaten for more than `threshold` seconds.
    DISPATCHER_GONE = "dispatcher_gone", "Dispatcher gone"


class AlertRule(models.Model):
    """What to watch, how far it may go, and whom to tell."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=AlertKind)
    threshold = models.FloatField(
        help_text="Dead jobs: a count; dispatcher gone, oldest due, start lag, no worker: seconds."
    )
    window = models.DurationField(
        default=dt.timedelta(minutes=15),
        help_text="Dead jobs and start lag: how far back to look.",
    )
    handler = models.CharField(
        max_length=200, blank=True, default="", help_text="Only this handler (empty: all)."
    )
    queue = models.CharField(
        max_length=64, blank=True, default="", help_text="Only this queue (empty: all)."
    )
    emails = models.TextField(
        blank=True, default="", help_text="Addresses to mail, separated by commas or lines."
    )
    webhook_url = models.CharField(
        max_length=500, blank=True, default="", help_text="An http(s) URL to POST JSON to."
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name

    @property
    def email_list(self) -> list[str]:
        return [e.strip() for e in self.emails.replace("\n", ",").split(",") if e.strip()]

    def channels(self) -> list[str]:
        return [
            name for name, on in (("email", self.email_list), ("webhook", self.webhook_url)) if on
        ]


class AlertIncident(models.Model):
    """One spell of a rule's condition holding for one key (a handler, a queue, a
    dispatcher). `deliveries` records, per notice ("firing", "resolved"), the channels
    that took it and when: a channel missing there is tried again at the next evaluation."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="incidents")
    key = models.CharField(max_length=200)
    summary = models.TextField(blank=True, default="")
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    last_notified_at = models.DateTimeField(null=True, blank=True)
    deliveries = models.JSONField(default=dict, blank=True)
    pending = models.BooleanField(default=True, help_text="A notice is still owed.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "key"],
                condition=Q(resolved_at__isnull=True),
                name="alert_incident_one_open",
            )
        ]
        indexes = [
            models.Index(fields=["-opened_at"], name="alert_incident_opened_idx"),
            models.Index(
                fields=["id"], name="alert_incident_pending_idx", condition=Q(pending=True)
            ),
        ]

    def __str__(self) -> str:
        state = "resolved" if self.resolved_at else "open"
        return f"{self.rule} {self.key} ({state})"
