"""Degraded mode as a pure decision: no database, the clock and the backlog given."""

from __future__ import annotations

from tasksapp.engine.dispatcher.degraded import DegradedMode

BACKLOG = "more than 100 due jobs waited unclaimed for over 30 s"


def _reason(mode: DegradedMode, now_s: float, waiting: int, **kwargs) -> str:
    options = {"operator": "", "index_unreachable": False, **kwargs}
    return mode.reason(now_ms=now_s * 1000, waiting=lambda: waiting, **options)


def test_a_backlog_degrades_after_its_spell_and_alternates_while_it_lasts():
    mode = DegradedMode(threshold=100, after_seconds=30)
    assert _reason(mode, 0, 500) == ""  # over the threshold: the spell starts
    assert _reason(mode, 29, 500) == ""
    assert _reason(mode, 30, 500) == BACKLOG  # degraded for one spell
    assert _reason(mode, 59, 0) == BACKLOG  # even if the backlog went meanwhile
    assert _reason(mode, 60, 500) == ""  # every job claimed again, a new spell starts
    assert _reason(mode, 90, 500) == BACKLOG


def test_a_backlog_that_falls_below_the_threshold_starts_over():
    mode = DegradedMode(threshold=100, after_seconds=30)
    assert _reason(mode, 0, 500) == ""
    assert _reason(mode, 20, 50) == ""
    assert _reason(mode, 40, 500) == ""  # the spell counts from here again
    assert _reason(mode, 69, 500) == ""
    assert _reason(mode, 70, 500) == BACKLOG


def test_an_operator_or_an_unreachable_index_degrade_at_once_and_threshold_0_never():
    never = DegradedMode(threshold=0, after_seconds=30)
    assert _reason(never, 0, 10**6) == "" and _reason(never, 1000, 10**6) == ""
    assert _reason(never, 0, 0, operator="deploy") == "switched on by an operator: deploy"
    assert _reason(never, 0, 0, index_unreachable=True) == "the Redis due index cannot be reached"
