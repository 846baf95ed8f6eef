"""The practice bench's ideal: a zero-overhead FIFO scheduler on the same slots."""

import math

import pytest

from bench.practice.ideal import Instance, efficient, excess_by_burst, ideal_delays

WORK_MS = 83.0


def test_jobs_within_the_slots_run_at_their_time():
    delays = ideal_delays([10.0, 10.0, 11.0], [Instance(start=0.0, slots=2)])
    assert delays == pytest.approx([WORK_MS] * 3)


def test_a_burst_larger_than_the_slots_waits_in_rounds_of_the_work():
    delays = ideal_delays([10.0] * 5, [Instance(start=0.0, slots=2)])
    assert sorted(delays) == pytest.approx([83, 83, 166, 166, 249])


def test_a_stopped_instance_takes_no_new_job_but_finishes_its_own():
    """SIGINT at 10.05: the job it began at 10.0 ends at 10.083; the next burst has one
    slot left."""
    instances = [Instance(start=0.0, slots=1), Instance(start=0.0, stop=10.05, slots=1)]
    delays = ideal_delays([10.0, 10.0, 20.0, 20.0], instances)
    assert delays == pytest.approx([83, 83, 83, 166])


def test_a_killed_instance_loses_its_running_job_which_starts_again_at_the_kill():
    """SIGKILL at 10.05 with a job begun at 10.0: ready again at 10.05 on the live slot,
    which is busy until 10.083; it ends at 10.166."""
    instances = [
        Instance(start=0.0, slots=1),
        Instance(start=0.0, stop=10.05, killed=True, slots=1),
    ]
    delays = ideal_delays([10.0, 10.0], instances)
    assert sorted(delays) == pytest.approx([83, 166])


def test_fifo_by_the_moment_a_job_became_ready():
    """A job ready at 10.01 waits behind the burst at 10.0, not before it."""
    delays = ideal_delays([10.01, 10.0, 10.0], [Instance(start=0.0, slots=1)])
    assert delays == pytest.approx([249 - 10, 83, 166])


def test_no_instance_left_is_refused():
    with pytest.raises(ValueError, match="no instance is left"):
        ideal_delays([10.0], [Instance(start=0.0, stop=5.0)])


def test_the_score_is_the_exercises_integer_average_plus_stdev():
    score = efficient([83.0, 83.0, 166.0])
    assert score["avg"] == 110  # 110.67, cut as the exercise's SQL AVG of integers
    assert score["stdev"] == pytest.approx(47.92, abs=0.01)
    assert score["efficient"] == pytest.approx(157.92, abs=0.01)
    assert efficient([])["efficient"] == 0 and not math.isnan(efficient([83.0])["stdev"])


def test_a_job_that_never_waits_scores_exactly_the_work():
    """Epoch seconds as the bench passes them: no float noise below 83 ms."""
    run_at = [1795570821.1 + 0.7 * i for i in range(50)]
    assert efficient(ideal_delays(run_at, [Instance(start=0.0)]))["efficient"] == 83


def test_excess_is_grouped_by_how_many_jobs_were_due_together():
    run_at = {1: 10.0, 2: 20.0, 3: 20.0, 4: 20.0, 5: 30.0}
    ideal = {1: 83.0, 2: 83.0, 3: 83.0, 4: 166.0, 5: 83.0}
    ours = {1: 84.0, 2: 85.0, 3: 87.0, 4: 176.0}  # job 5 never executed: not counted
    rows = {row["jobs"]: row for row in excess_by_burst(run_at, ours, ideal)}
    assert rows["due alone"]["n"] == 1
    assert rows["due alone"]["excess_avg_ms"] == 1.0
    assert rows["due 2-9 at once"]["n"] == 3
    assert rows["due 2-9 at once"]["excess_avg_ms"] == 5.33  # (2 + 4 + 10) / 3
    assert rows["due 2-9 at once"]["share_of_excess"] == 0.94  # 16 of 17 ms
    assert "due 10+ at once" not in rows
