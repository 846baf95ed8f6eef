from .jobs import DUE_STATES, FINAL_STATES, LEASED_STATES, Delivery, Job, JobState
from .processes import Dispatcher, DispatcherCounter, WorkerProcess
from .routing import JobQueue, RoutingMode

__all__ = [
    "DUE_STATES",
    "FINAL_STATES",
    "LEASED_STATES",
    "Delivery",
    "Dispatcher",
    "DispatcherCounter",
    "Job",
    "JobQueue",
    "JobState",
    "RoutingMode",
    "WorkerProcess",
]
