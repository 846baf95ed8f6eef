from .jobs import Delivery, Job, JobState
from .processes import Dispatcher, DispatcherCounter, WorkerProcess

__all__ = [
    "Delivery",
    "Dispatcher",
    "DispatcherCounter",
    "Job",
    "JobState",
    "WorkerProcess",
]
