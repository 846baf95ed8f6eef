"""Retention ages given per finished state (a recurring task's, a handler's): checked
here, where handlers (which cannot import the job options) and the options both reach."""

from __future__ import annotations

from typing import Any

ERR_RETENTION = (
    "retention must map finished states ({states}) to days from 0.01 to 36500, such as "
    '{{"succeeded": 3, "dead": 60}}; {{}} keeps the defaults.'
)
MIN_DAYS, MAX_DAYS = 0.01, 36_500.0


class RetentionAgesError(ValueError):
    pass


def retention_ages(retention: Any) -> dict[str, float]:
    """Days per finished state, as floats; None or {} for none."""
    if retention is None or retention == {}:
        return {}  # before the models: a handler module may be imported before Django is
    from tasksapp.engine.models import FINAL_STATES  # models load after the handlers

    valid = (
        isinstance(retention, dict)
        and set(retention) <= set(FINAL_STATES)
        and all(
            not isinstance(days, bool)
            and isinstance(days, int | float)
            and MIN_DAYS <= days <= MAX_DAYS
            for days in retention.values()
        )
    )
    if not valid:
        raise RetentionAgesError(ERR_RETENTION.format(states=", ".join(FINAL_STATES)))
    return {state: float(retention[state]) for state in FINAL_STATES if state in retention}
