from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class JobQueue(models.Model):
    """An operator's settings of one queue. A queue with no row (or a row with no limits)
    costs nothing on the claim path; docs/ROUTING.md."""

    name = models.CharField(max_length=64, unique=True)
    paused = models.BooleanField(default=False, help_text="Dispatchers claim none of its jobs.")
    concurrency_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many of its jobs claimed or running."
    )
    key_concurrency_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many per concurrency key."
    )
    rate_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many starts per rate period."
    )
    rate_period = models.FloatField(default=1.0, help_text="Seconds.")
    # The rate limit's state (GCRA): the theoretical arrival time of the next start.
    rate_tat = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(rate_period__gt=0), name="jobqueue_rate_period_gt_0")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def limited(self) -> bool:
        return any(
            limit is not None
            for limit in (self.concurrency_limit, self.key_concurrency_limit, self.rate_limit)
        )


class QueueStartRate(models.Model):
    """A rate-limited queue's starts (GCRA, as `JobQueue.rate_tat` counts its claims):
    the theoretical arrival time of its next start, moved on by each handler of the queue
    before it begins. Claims are paced by the rate; this keeps the starts to it too when
    their messages reach the workers bunched (a worker that fell behind). A row of its own,
    not a column of the queue's, so that starts never contend with the claim's lock."""

    queue = models.CharField(max_length=64, primary_key=True)
    tat = models.DateTimeField()

    def __str__(self) -> str:
        return self.queue


class RoutingMode(models.Model):
    """The one row (id 1) of the cluster's routing mode: degraded or not, as an operator
    switched it; dispatchers add the automatic conditions (docs/ROUTING.md)."""

    degraded = models.BooleanField(default=False)
    reason = models.CharField(max_length=200, blank=True, default="")
    critical_priority = models.SmallIntegerField(
        default=9, help_text="While degraded only jobs at or above this priority are claimed."
    )
    changed_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return "degraded" if self.degraded else "normal"
