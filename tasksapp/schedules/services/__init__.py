"""Schedules: create, edit, pause, resume, run now, delete; the planner that turns fire
times into jobs ahead of time; the catch-up of late runs and the overlap policy, both
checked when a run starts. Bad input raises ScheduleInputError and stores nothing."""

from .errors import ScheduleInputError
from .late import LateDecision, schedule_late_check
from .planner import (
    PlanSummary,
    fire_job_key,
    schedule_plan,
    schedule_runs_prune,
    schedules_plan_due,
)
from .runs import OverlapDecision, schedule_overlap_check
from .schedules import (
    EDITABLE,
    duration_of,
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_run_now,
    schedule_update,
)

__all__ = [
    "EDITABLE",
    "LateDecision",
    "OverlapDecision",
    "PlanSummary",
    "ScheduleInputError",
    "duration_of",
    "fire_job_key",
    "schedule_create",
    "schedule_delete",
    "schedule_late_check",
    "schedule_overlap_check",
    "schedule_pause",
    "schedule_plan",
    "schedule_resume",
    "schedule_run_now",
    "schedule_runs_prune",
    "schedule_update",
    "schedules_plan_due",
]
