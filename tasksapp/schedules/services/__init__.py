"""Schedules: create, edit, pause, resume, run now, delete; the planner that turns fire
times into jobs ahead of time; the overlap policy checked when a run starts. Bad input
raises ScheduleInputError and stores nothing."""

from .errors import ScheduleInputError
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
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_run_now,
    schedule_update,
)

__all__ = [
    "EDITABLE",
    "OverlapDecision",
    "PlanSummary",
    "ScheduleInputError",
    "fire_job_key",
    "schedule_create",
    "schedule_delete",
    "schedule_overlap_check",
    "schedule_pause",
    "schedule_plan",
    "schedule_resume",
    "schedule_run_now",
    "schedule_runs_prune",
    "schedule_update",
    "schedules_plan_due",
]
