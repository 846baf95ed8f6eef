"""Probabilistic sub-interval planning (golden-ratio / random phases): members, recurring
tasks, and the planner that turns one slice of one period into jobs at a time. Bad input
raises PlanningInputError and stores nothing.

Members and the planner never miss each other. Planning a slice locks its task's row
FOR UPDATE until it commits; creating, deleting or (de)activating a member first locks
every active task's row FOR SHARE, then reads the planned slices. So either the slice's
insert sees the member, or the member sees the slice plan and plans (or cancels) its own
jobs in it. Job idempotency keys (`plan:<task>:<period>:<member>`) make any overlap
harmless.
"""

from .audiences import AudienceSync, audience_objects_changed, audience_sync, audience_sync_all
from .errors import PlanningInputError
from .members import (
    MAX_MEMBER_IDS,
    MemberBatch,
    member_activate,
    member_activate_many,
    member_create,
    member_create_many,
    member_deactivate,
    member_deactivate_many,
    member_delete,
    member_delete_many,
)
from .planner import plan_due_slices
from .recurring_tasks import UNCHANGED, recurring_task_create, recurring_task_update
from .slices import PlanningSummary, job_key_prefix, slice_plan

__all__ = [
    "AudienceSync",
    "audience_objects_changed",
    "audience_sync",
    "audience_sync_all",
    "MAX_MEMBER_IDS",
    "UNCHANGED",
    "MemberBatch",
    "PlanningInputError",
    "PlanningSummary",
    "job_key_prefix",
    "member_activate",
    "member_activate_many",
    "member_create",
    "member_create_many",
    "member_deactivate",
    "member_deactivate_many",
    "member_delete",
    "member_delete_many",
    "plan_due_slices",
    "recurring_task_create",
    "recurring_task_update",
    "slice_plan",
]
