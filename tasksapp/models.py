"""The app's models, gathered from its feature packages (Django looks for them here).
Tables keep the `tasksapp_` prefix: the app label is `tasksapp`."""

from tasksapp.alerts.models import AlertIncident, AlertRule
from tasksapp.engine.models import (
    Delivery,
    Dispatcher,
    DispatcherCounter,
    Job,
    JobState,
    WorkerProcess,
)
from tasksapp.graphs.models import GraphRun, GraphState, Strategy, TaskRun, TaskState
from tasksapp.recurring.models import FreeOrdinal, Member, RecurringTask, SlicePlan
from tasksapp.retention.models import JobRollup, RollupMark
from tasksapp.schedules.models import Schedule, ScheduleRun
from tasksapp.web.models import ApiToken, OperatorAction

__all__ = [
    "AlertIncident",
    "AlertRule",
    "ApiToken",
    "Delivery",
    "Dispatcher",
    "DispatcherCounter",
    "FreeOrdinal",
    "GraphRun",
    "GraphState",
    "Job",
    "JobRollup",
    "JobState",
    "Member",
    "OperatorAction",
    "RecurringTask",
    "RollupMark",
    "Schedule",
    "ScheduleRun",
    "SlicePlan",
    "Strategy",
    "TaskRun",
    "TaskState",
    "WorkerProcess",
]
