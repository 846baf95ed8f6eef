"""Jobs as task graphs: one GraphRun per graph job, one TaskRun per task of its plan.

The parent Job starts the graph; each task runs as a child Job of the engine
(`tasksapp.graphs.runner`). Only the graph services (`tasksapp.graphs.services`) write
these rows, always with the GraphRun row locked; see docs/GRAPHS.md.
"""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from tasksapp.engine.models import Job


class Strategy(models.TextChoices):
    ABORT = "abort"  # stop the graph at the first failure; the rest is skipped
    RERUN = "rerun"  # rescue hook, then retry only the failed task (bounded), then abort
    RESTART = "restart"  # reset and run the whole graph again (bounded), then abort
    ROLLBACK = "rollback"  # roll back completed tasks in reverse completion order, then fail


class GraphState(models.TextChoices):
    PENDING = "pending"  # scheduled; its parent job has not run yet
    RUNNING = "running"
    ROLLING_BACK = "rolling_back"  # a task failed; completed tasks are being rolled back
    SUCCEEDED = "succeeded"
    ABORTED = "aborted"  # a task failed (for good) and the graph stopped
    ROLLED_BACK = "rolled_back"  # a task failed and every completed task was rolled back
    FAILED = "failed"  # a rollback hook failed for good: not everything was undone
    CANCELLED = "cancelled"  # an operator cancelled it (after its rollback, if any)


GRAPH_FINAL_STATES = (
    GraphState.SUCCEEDED,
    GraphState.ABORTED,
    GraphState.ROLLED_BACK,
    GraphState.FAILED,
    GraphState.CANCELLED,
)


class TaskState(models.TextChoices):
    WAITING = "waiting"  # some task it runs after has not succeeded yet
    READY = "ready"  # released: its child job exists (scheduled, claimed or running)
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # failed for good (out of reruns, or the strategy gave up)
    SKIPPED = "skipped"  # never ran: the graph stopped first
    ROLLED_BACK = "rolled_back"


class GraphRun(models.Model):
    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, related_name="graph_run", help_text="The parent job."
    )
    has = models.JSONField(default=dict, help_text="The job's initial values by proposition.")
    wants = models.JSONField(default=list, help_text="The propositions it wants.")
    strategy = models.CharField(max_length=16, choices=Strategy, default=Strategy.ABORT)
    plan = models.JSONField(help_text="Plan.as_dict() of the plan being run.")
    state = models.CharField(max_length=16, choices=GraphState, default=GraphState.PENDING)
    values = models.JSONField(
        default=dict, help_text="The job's state: has, merged with every completed output."
    )
    result = models.JSONField(null=True, blank=True, help_text="The wanted values, once done.")
    error = models.TextField(blank=True, default="")
    generation = models.PositiveIntegerField(default=0, help_text="Bumped by every restart.")
    restarts = models.PositiveIntegerField(default=0)
    max_restarts = models.PositiveIntegerField(default=2)
    max_task_attempts = models.PositiveIntegerField(default=3, help_text="Rerun strategy.")
    task_retry_policy = models.JSONField(default=dict, blank=True, help_text="Rerun strategy.")
    on_complete = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="Handler of the job scheduled when the graph ends (its outcome in the payload).",
    )
    cancelled_at = models.DateTimeField(
        null=True, blank=True, help_text="When an operator cancelled it."
    )
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # Serves the list of graph runs in one state, newest first.
        indexes = [models.Index(fields=["state", "id"], name="graphrun_state_id_idx")]
        constraints = [
            models.CheckConstraint(
                condition=Q(max_task_attempts__gte=1), name="graphrun_max_task_attempts_gte_1"
            ),
        ]

    def __str__(self) -> str:
        return f"Graph {self.pk} wants {', '.join(self.wants)} ({self.state})"


class TaskRun(models.Model):
    graph_run = models.ForeignKey(GraphRun, on_delete=models.CASCADE, related_name="task_runs")
    task = models.CharField(max_length=200, help_text="Registered graph task name.")
    layer = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=TaskState, default=TaskState.WAITING)
    attempts = models.PositiveIntegerField(default=0, help_text="Runs with a recorded outcome.")
    inputs = models.JSONField(null=True, blank=True, help_text="Of the latest run.")
    rescued = models.JSONField(
        default=dict, blank=True, help_text="Inputs replaced by the rescue hook for retries."
    )
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    errors = models.JSONField(default=list, blank=True, help_text="Every failure, all restarts.")
    done_order = models.PositiveIntegerField(
        null=True, blank=True, help_text="Completion order within the generation."
    )
    job = models.ForeignKey(
        Job,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The child job of its current run; any other job for it is stale.",
    )
    created_at = models.DateTimeField(db_default=Now())
    released_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["graph_run", "task"], name="taskrun_graph_task_uniq"),
        ]

    def __str__(self) -> str:
        return f"TaskRun {self.pk} {self.task} ({self.state})"
