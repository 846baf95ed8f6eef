from .audit import OperatorAction
from .jobs import Delivery, Job, JobState
from .planning import FreeOrdinal, Member, RecurringTask, SlicePlan
from .processes import Dispatcher, DispatcherCounter, WorkerProcess

__all__ = [
    "Delivery",
    "Dispatcher",
    "DispatcherCounter",
    "FreeOrdinal",
    "Job",
    "JobState",
    "Member",
    "OperatorAction",
    "RecurringTask",
    "SlicePlan",
    "WorkerProcess",
]

from .graphs import GraphRun, GraphState, Strategy, TaskRun, TaskState  # noqa: E402

__all__ += ["GraphRun", "GraphState", "Strategy", "TaskRun", "TaskState"]
