"""Writes. Entry points (views, admin, API, Celery tasks, commands) call these."""

from .jobs import JobInputError, job_cancel, job_retry, job_run_now, job_schedule

__all__ = ["JobInputError", "job_cancel", "job_retry", "job_run_now", "job_schedule"]

from .planning import (  # noqa: E402
    PlanningInputError,
    member_activate,
    member_create,
    member_create_many,
    member_deactivate,
    member_delete,
    plan_due_slices,
    recurring_task_create,
    recurring_task_update,
    slice_plan,
)

__all__ += [
    "PlanningInputError",
    "member_activate",
    "member_create",
    "member_create_many",
    "member_deactivate",
    "member_delete",
    "plan_due_slices",
    "recurring_task_create",
    "recurring_task_update",
    "slice_plan",
]

from .operators import (  # noqa: E402
    OperatorPermissionError,
    job_cancel_audited,
    job_retry_audited,
    job_run_now_audited,
    member_activate_audited,
    member_deactivate_audited,
    operator_action_record,
    recurring_task_pause_audited,
    recurring_task_resume_audited,
    roles_ensure,
)

__all__ += [
    "OperatorPermissionError",
    "job_cancel_audited",
    "job_retry_audited",
    "job_run_now_audited",
    "member_activate_audited",
    "member_deactivate_audited",
    "operator_action_record",
    "recurring_task_pause_audited",
    "recurring_task_resume_audited",
    "roles_ensure",
]

from .graphs import GraphInputError, graph_job_schedule  # noqa: E402

__all__ += ["GraphInputError", "graph_job_schedule"]
