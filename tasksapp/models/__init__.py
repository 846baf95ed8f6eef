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
    "RecurringTask",
    "SlicePlan",
    "WorkerProcess",
]
