"""Operators' actions on many members at once: delete, deactivate or activate them by id
(member_delete_many and its siblings, tasksapp.recurring.services), recorded.

Like the single-member actions (operators.py) each is permission-checked and recorded,
but as one audit row for the whole batch: the action, the ids asked for (the first
RECORDED_IDS of them, and how many there were), the members changed and the jobs
cancelled or planned again. The batch and its row commit together, or neither does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasksapp.recurring.services import (
    MemberBatch,
    PlanningInputError,
    member_activate_many,
    member_deactivate_many,
    member_delete_many,
)
from tasksapp.web.operators import (
    ERR_NOT_OPERATOR,
    PERM_OPERATE,
    OperatorPermissionError,
    operator_action_record,
)
from tasksapp.web.transactions import audited_atomic

MEMBER_BATCH_ACTIONS = {
    "delete": member_delete_many,
    "deactivate": member_deactivate_many,
    "activate": member_activate_many,
}
ACTION_PREFIX = "members_"  # recorded as members_delete, members_deactivate, members_activate
TARGET_TYPE = "members"
TARGET_ID = "ids"
RECORDED_IDS = 100
ERR_BATCH_ACTION = "action must be one of delete, deactivate, activate (got {value!r})."


def member_batch_audited(
    *, user: Any, via: str, action: str, member_ids: Sequence[int]
) -> MemberBatch:
    """Delete, deactivate or activate members `member_ids` as an operator, recorded (see
    the module's docstring). Bad input raises PlanningInputError and changes nothing."""
    if not (user and user.is_authenticated and user.has_perm(PERM_OPERATE)):
        raise OperatorPermissionError(ERR_NOT_OPERATOR.format(user=user or "anonymous"))
    service = MEMBER_BATCH_ACTIONS.get(action) if isinstance(action, str) else None
    if service is None:
        raise PlanningInputError(ERR_BATCH_ACTION.format(value=action))
    with audited_atomic():
        result = service(member_ids=member_ids)
        operator_action_record(
            user=user,
            via=via,
            action=f"{ACTION_PREFIX}{action}",
            target_type=TARGET_TYPE,
            target_id=TARGET_ID,
            details={
                "ids": list(member_ids)[:RECORDED_IDS],
                "ids_asked": len(member_ids),
                "members": result.members,
                "jobs": result.jobs,
            },
        )
    return result
