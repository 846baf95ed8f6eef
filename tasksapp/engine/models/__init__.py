from .jobs import DUE_STATES, FINAL_STATES, LEASED_STATES, Delivery, Job, JobState
from .processes import Dispatcher, DispatcherCounter, WorkerProcess

__all__ = [
    "DUE_STATES",
    "FINAL_STATES",
    "LEASED_STATES",
    "Delivery",
    "Dispatcher",
    "DispatcherCounter",
    "Job",
    "JobState",
    "WorkerProcess",
]
