from django.db import models
from django.db.models.functions import Now


class Dispatcher(models.Model):
    """One dispatcher process: heartbeat and the partitions it owns."""

    name = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=200)
    pid = models.IntegerField()
    started_at = models.DateTimeField(db_default=Now())
    heartbeat_at = models.DateTimeField(db_default=Now())
    stopped_at = models.DateTimeField(null=True, blank=True)
    partitions = models.JSONField(default=list, blank=True)
    clock_offset_ms = models.FloatField(default=0.0)
    # "database", "redis", or a Redis-mode fallback the dashboard warns about:
    # "redis-fallback" (shards being rebuilt are polled), "redis-unreachable" (all are).
    dispatch_mode = models.CharField(max_length=40, default="database")
    # Why this dispatcher claims only critical work now ("" while it claims everything).
    degraded_reason = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["heartbeat_at"], name="dispatcher_heartbeat_idx")]

    def __str__(self) -> str:
        return self.name


class DispatcherCounter(models.Model):
    """Per dispatcher and minute: what the polling-scheduler practice exercise's cost score
    counts, and more."""

    dispatcher = models.CharField(max_length=200)
    minute = models.DateTimeField()
    polls = models.IntegerField(default=0)
    rows_fetched = models.IntegerField(default=0)
    claims = models.IntegerField(default=0)
    claims_lost = models.IntegerField(default=0)
    single_reads = models.IntegerField(default=0)
    reaped = models.IntegerField(default=0)
    messages = models.IntegerField(default=0)
    notifications = models.IntegerField(default=0)
    statements = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dispatcher", "minute"], name="counter_unique_minute")
        ]
        indexes = [models.Index(fields=["minute"], name="counter_minute_idx")]

    def __str__(self) -> str:
        return f"{self.dispatcher} @ {self.minute:%Y-%m-%d %H:%M}"


class WorkerProcess(models.Model):
    """One Celery worker process, as seen by its lease keeper."""

    name = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=200)
    pid = models.IntegerField()
    started_at = models.DateTimeField(db_default=Now())
    heartbeat_at = models.DateTimeField(db_default=Now())
    running = models.IntegerField(default=0)
    succeeded = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    queues = models.JSONField(default=list, blank=True, help_text="The Tempo queues it serves.")
    # How long its slowest handler of the last two heartbeats ran: dispatchers send jobs
    # spread in time to its queues in one message only where one slot runs them in turn.
    slowest_handler_ms = models.FloatField(
        null=True, blank=True, help_text="Its slowest handler lately, in ms; empty: none ran."
    )
    # The key of the advisory lock its liveness session holds (PostgreSQL ends the
    # session, and frees the lock, the moment the process dies); NULL: it holds none, or
    # a dispatcher has found it dead and ended its jobs' leases.
    liveness_key = models.IntegerField(
        null=True, blank=True, help_text="Its liveness lock's key; empty: none held."
    )
    # {job id: token} of the jobs it runs whose start is not written yet (never an
    # at-most-once one; claimed, not running): a dispatcher that finds it dead counts
    # their attempts and returns them at once. Entries of jobs that moved on are dropped
    # at each heartbeat.
    held = models.JSONField(
        null=True, blank=True, help_text="Jobs it runs whose start is deferred: {id: token}."
    )

    def __str__(self) -> str:
        return self.name
