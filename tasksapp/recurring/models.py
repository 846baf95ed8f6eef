"""Probabilistic sub-interval planning (golden-ratio / random phases): members, recurring
tasks and planned slices.

A member's `phase` in [0, 1) is given once, at creation. A recurring task with period T,
epoch E and S slices runs occurrence k for the member at E + (k + phase) × T; the planner
turns slice s of period k (the members with s/S ≤ phase < (s+1)/S) into jobs, once.
"""

from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from tasksapp.engine.models import Delivery
from tasksapp.recurring import localtime
from tasksapp.recurring.schedule import MICROSECOND, phase_offset, slice_bounds


class Member(models.Model):
    """Someone work is done for: a user of the product (operators are Django auth users)."""

    external_id = models.CharField(max_length=200, unique=True, help_text="Id in the product.")
    ordinal = models.BigIntegerField(
        unique=True, help_text="Index into the phase sequence; a deleted member's is reused."
    )
    phase = models.FloatField(help_text="Where in every period this member runs, in [0, 1).")
    active = models.BooleanField(default=True, help_text="Inactive members are not planned.")
    created_at = models.DateTimeField(db_default=Now())
    # The object this member stands for, when an audience brought it in (its model and
    # primary key as text); empty for members created by external_id.
    content_type = models.ForeignKey(
        ContentType, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    object_id = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        indexes = [
            # Serves slice planning: the active members of one phase range.
            models.Index(fields=["phase"], name="member_active_phase_idx", condition=Q(active=True))
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(phase__gte=0) & Q(phase__lt=1), name="member_phase_in_0_1"
            ),
            models.CheckConstraint(condition=Q(ordinal__gte=0), name="member_ordinal_gte_0"),
            models.UniqueConstraint(
                fields=["content_type", "object_id"],
                condition=Q(content_type__isnull=False),
                name="member_object_unique",
            ),
        ]

    def __str__(self) -> str:
        return self.external_id


class FreeOrdinal(models.Model):
    """An ordinal given back by a deleted member; the next member created takes the lowest
    one, and with it the same golden-ratio phase."""

    ordinal = models.BigIntegerField(primary_key=True)

    def __str__(self) -> str:
        return str(self.ordinal)


class RecurringTask(models.Model):
    """Work that runs once per period for every active member, or for the members of its
    audience (the host's own objects, see AudienceMember), spread by phase.

    The schedule: period `first_period` starts at `epoch`, every period lasts `period` and
    is planned in `slices` slices. A change of period or slices waits in the `next_*`
    fields for period `next_from` to begin (see docs/PLANNING.md). With a `timezone`
    other than UTC, periods are whole local calendar days from local midnight (`epoch`
    is period `first_period`'s midnight) and a member keeps its local time of day."""

    name = models.CharField(max_length=100, unique=True)
    handler = models.CharField(max_length=200, help_text="Dotted path to a callable.")
    payload = models.JSONField(default=dict, blank=True, help_text="Merged into every job's.")
    max_attempts = models.PositiveIntegerField(default=5)
    retry_policy = models.JSONField(default=dict, blank=True)
    delivery = models.CharField(max_length=16, choices=Delivery, default=Delivery.TRANSACTIONAL)
    time_limit = models.FloatField(null=True, blank=True, help_text="Seconds per attempt.")
    queue = models.CharField(max_length=64, default="default")
    priority = models.SmallIntegerField(default=5)
    concurrency_key = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="Counted by the queue's per-key limit; {member} becomes the member's id.",
    )

    epoch = models.DateTimeField(help_text="When period `first_period` starts.")
    first_period = models.BigIntegerField(default=0)
    period = models.DurationField()
    slices = models.PositiveIntegerField(default=1)
    next_from = models.BigIntegerField(null=True, blank=True)
    next_period = models.DurationField(null=True, blank=True)
    next_slices = models.PositiveIntegerField(null=True, blank=True)
    timezone = models.CharField(
        max_length=64,
        default=localtime.UTC_NAME,
        help_text="IANA time zone whose calendar days the periods follow (whole days only); "
        "UTC: fixed-length periods from the epoch.",
    )

    active = models.BooleanField(default=True, help_text="Inactive tasks are not planned.")
    created_at = models.DateTimeField(db_default=Now())
    retention = models.JSONField(
        default=dict,
        blank=True,
        help_text='Days its finished jobs are kept, per state: {"succeeded": 3, "dead": 60}. '
        "States not named keep the handler's or the default ages.",
    )

    # Who it runs for: every active member (audience empty), or the members standing for
    # the objects of an audience: a model label ("auth.User") with `audience_filter`, or
    # the dotted name of a function registered with @audience (docs/PLANNING.md).
    audience = models.CharField(max_length=200, blank=True, default="")
    audience_filter = models.JSONField(default=dict, blank=True)
    phase_strategy = models.CharField(max_length=16, default="golden")
    phase_shift = models.FloatField(
        default=0.0, help_text="Added to each member's phase (mod 1) for this task's members."
    )
    aligned_with = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    audience_synced_at = models.DateTimeField(null=True, blank=True)
    audience_joined = models.PositiveIntegerField(default=0, help_text="At the last sync.")
    audience_left = models.PositiveIntegerField(default=0, help_text="At the last sync.")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(slices__gte=1), name="recurring_slices_gte_1"),
            models.CheckConstraint(
                condition=Q(
                    next_from__isnull=True, next_period__isnull=True, next_slices__isnull=True
                )
                | Q(next_from__isnull=False, next_period__isnull=False, next_slices__isnull=False),
                name="recurring_next_all_or_none",
            ),
            models.CheckConstraint(
                condition=Q(phase_shift__gte=0) & Q(phase_shift__lt=1),
                name="recurring_phase_shift_in_0_1",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class AudienceMember(models.Model):
    """A member of a task with an audience, and its phase in that task: the member's own
    phase shifted by the task's (golden) or a random one, given once when it joined.

    `active` is the member's own flag, kept here by every statement that changes it (the
    pass, members deactivated and activated), so a slice reads these rows alone: one range
    scan of audience_member_slice_idx, as a task without audience scans its members'."""

    task = models.ForeignKey(RecurringTask, on_delete=models.CASCADE, related_name="+")
    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="+")
    phase = models.FloatField()
    active = models.BooleanField(default=True, db_default=True, help_text="The member's.")
    joined_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "member"], name="audience_member_unique"),
            models.CheckConstraint(
                condition=Q(phase__gte=0) & Q(phase__lt=1), name="audience_member_phase_in_0_1"
            ),
        ]
        # Serves slice planning of an audience task: its active members of one phase range.
        # On PostgreSQL it also holds member_id (INCLUDE, migration 0025), so the slice's
        # rows are read from the index alone.
        indexes = [
            models.Index(
                fields=["task", "phase"],
                name="audience_member_slice_idx",
                condition=Q(active=True),
            )
        ]

    def __str__(self) -> str:
        return f"{self.task_id}: {self.member_id}"


class SlicePlan(models.Model):
    """Slice `slice_index` of period `period` of a task, planned into jobs once.

    It keeps the grid it was planned with, so a member created later can be added to it
    even after the task's period or slice count changed."""

    task = models.ForeignKey(RecurringTask, on_delete=models.CASCADE, related_name="slice_plans")
    period = models.BigIntegerField()
    slice_index = models.PositiveIntegerField()
    slices = models.PositiveIntegerField()
    period_start = models.DateTimeField()
    period_length = models.DurationField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    jobs_planned = models.PositiveIntegerField(default=0)
    missed = models.PositiveIntegerField(
        default=0, help_text="Members whose time had passed beyond the grace when planned."
    )
    duration_ms = models.FloatField(default=0.0)
    planned_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["task", "period", "slice_index"], name="slice_plan_unique"
            )
        ]
        indexes = [models.Index(fields=["ends_at"], name="slice_plan_ends_at_idx")]

    def __str__(self) -> str:
        return f"{self.task_id}: period {self.period}, slice {self.slice_index}/{self.slices}"

    @property
    def phase_bounds(self) -> tuple[float, float]:
        return slice_bounds(self.slice_index, self.slices)

    def contains(self, phase: float) -> bool:
        low, high = self.phase_bounds
        return low <= phase < high

    def occurrence(self, phase: float):
        """When a member with `phase` runs in this slice's period."""
        offset = phase_offset(phase, self.period_length)
        if self.task.timezone == localtime.UTC_NAME:
            return self.period_start + offset
        return localtime.wall_instant(self.regimes(), offset // MICROSECOND)

    def regimes(self) -> tuple[localtime.Regime, ...]:
        """The wall-time regimes of the period of a task with a time zone (localtime)."""
        zone = self.task.timezone
        day = localtime.local_date(self.period_start, zone)
        return localtime.regimes(zone, day, self.period_length.days)
