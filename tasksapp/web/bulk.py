"""Operators' bulk actions on jobs (retry, cancel, run now by filter), recorded.

Like the single-job actions (operators.py) each is permission-checked and recorded, but
as one audit row for the whole action: its filter, how many jobs it matched and changed,
and whether it saw every matching job. The jobs change chunk by chunk, each chunk
committed on its own, so the row is written when the action ends, however it ends: an
action interrupted by an error is recorded with what it had changed by then. A dry run
changes nothing and records nothing, as a refused action.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from tasksapp.engine.services import BulkResult, job_bulk_action
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import (
    ERR_NOT_OPERATOR,
    PERM_OPERATE,
    OperatorPermissionError,
    operator_action_record,
)

ACTION_PREFIX = "bulk_"  # recorded as bulk_retry, bulk_cancel, bulk_run_now
TARGET_TYPE = "jobs"
TARGET_ID = "filter"
RECORDED_IDS = 100  # of a filter by ids, the ids its record keeps (and how many it had)


def job_bulk_action_audited(
    *,
    user: Any,
    via: str,
    action: str,
    filter: Mapping[str, Any],
    dry_run: bool,
    after: int | None = None,
    time_budget: float | None = None,
) -> BulkResult:
    """job_bulk_action by an operator, recorded (see the module's docstring)."""
    if not (user and user.is_authenticated and user.has_perm(PERM_OPERATE)):
        raise OperatorPermissionError(ERR_NOT_OPERATOR.format(user=user or "anonymous"))
    return _bulk_recorded(
        user=user,
        username=None,
        via=via,
        action=action,
        filter=filter,
        dry_run=dry_run,
        after=after,
        time_budget=time_budget,
    )


def job_bulk_action_by_command(
    *,
    username: str,
    action: str,
    filter: Mapping[str, Any],
    dry_run: bool,
    on_chunk: Callable[[BulkResult], None] | None = None,
) -> BulkResult:
    """job_bulk_action from manage.py, recorded under `username`: whoever runs it has
    the database already, so no role is asked for."""
    return _bulk_recorded(
        user=None,
        username=username,
        via=OperatorAction.Via.COMMAND,
        action=action,
        filter=filter,
        dry_run=dry_run,
        on_chunk=on_chunk,
    )


def _bulk_recorded(
    *,
    user: Any,
    username: str | None,
    via: str,
    action: str,
    filter: Mapping[str, Any],
    dry_run: bool,
    on_chunk: Callable[[BulkResult], None] | None = None,
    **options: Any,
) -> BulkResult:
    progress: list[BulkResult] = []  # the totals after the last chunk

    def heard(result: BulkResult) -> None:
        progress[:] = [result]
        if on_chunk is not None:
            on_chunk(result)

    try:
        result = job_bulk_action(
            action=action, filter=filter, dry_run=dry_run, on_chunk=heard, **options
        )
    except BaseException as exc:
        if progress and not dry_run:  # some jobs changed before it stopped
            _record(user, username, via, progress[0], filter, interrupted=type(exc).__name__)
        raise
    if not dry_run:
        _record(user, username, via, result, filter)
    return result


def _record(
    user: Any,
    username: str | None,
    via: str,
    result: BulkResult,
    filter: Mapping[str, Any],
    interrupted: str = "",
) -> None:
    details = {
        "filter": _recorded_filter(filter),
        "matched": result.matched,
        "changed": result.changed,
        "complete": result.complete and not interrupted,
        "next_after": result.next_after,
    }
    if interrupted:
        details["interrupted_by"] = interrupted
    operator_action_record(
        user=user,
        username=username,
        via=via,
        action=ACTION_PREFIX + result.action,
        target_type=TARGET_TYPE,
        target_id=TARGET_ID,
        details=details,
    )


def _recorded_filter(filter: Mapping[str, Any]) -> dict[str, Any]:
    """The filter as JSON (datetimes as ISO text); a long list of ids cut to its first
    RECORDED_IDS, with their count."""
    recorded = json.loads(json.dumps(dict(filter), cls=DjangoJSONEncoder))
    ids = recorded.get("ids")
    if isinstance(ids, list) and len(ids) > RECORDED_IDS:
        recorded["ids"], recorded["ids_count"] = ids[:RECORDED_IDS], len(ids)
    return recorded
