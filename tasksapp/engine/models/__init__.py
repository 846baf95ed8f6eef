from .jobs import (
    DUE_STATES,
    FINAL_STATES,
    LEASED_STATES,
    NOT_LEASED,
    Delivery,
    Job,
    JobSearchText,
    JobState,
)
from .processes import Dispatcher, DispatcherCounter, WorkerProcess
from .routing import JobQueue, QueueStartRate, RoutingMode

__all__ = [
    "DUE_STATES",
    "FINAL_STATES",
    "LEASED_STATES",
    "NOT_LEASED",
    "Delivery",
    "Dispatcher",
    "DispatcherCounter",
    "Job",
    "JobQueue",
    "JobSearchText",
    "JobState",
    "QueueStartRate",
    "RoutingMode",
    "WorkerProcess",
]
