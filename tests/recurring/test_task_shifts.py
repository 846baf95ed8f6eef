"""Per-task phase shifts (pure): tasks of the same period spread apart as evenly as
members do, and a shifted phase stays in [0, 1)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasksapp.recurring.phases import golden_phase, shifted_phase, task_shift


@pytest.mark.parametrize("tasks", [2, 10, 100, 1000])
def test_the_shifts_of_the_first_tasks_leave_no_small_gap(tasks):
    shifts = sorted(task_shift(task_id) for task_id in range(1, tasks + 1))
    gaps = [b - a for a, b in zip(shifts, [*shifts[1:], shifts[0] + 1], strict=True)]
    # Three gap lengths at most; the smallest is over a third of the even share.
    assert min(gaps) > 0.33 / tasks
    assert len({round(g, 9) for g in gaps}) <= 3


@given(st.floats(0, 1, exclude_max=True), st.integers(1, 2**40))
def test_a_shifted_phase_stays_in_0_1(phase, task_id):
    shifted = shifted_phase(phase, task_shift(task_id))
    assert 0 <= shifted < 1
    assert task_shift(task_id) == golden_phase(task_id)


def test_two_tasks_never_share_a_members_instant():
    for member in range(1000):
        phase = golden_phase(member)
        assert shifted_phase(phase, task_shift(1)) != shifted_phase(phase, task_shift(2))
