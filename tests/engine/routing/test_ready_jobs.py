"""The dispatcher's claim order (ReadyJobs)."""

from tasksapp.engine.dispatcher.routing import ReadyJobs, Route

MINUTE = 60_000.0


def ready(*jobs: tuple[int, str, int, float], aging_ms: float = MINUTE) -> ReadyJobs:
    held = ReadyJobs(aging_ms=aging_ms)
    for job_id, queue, priority, run_at in jobs:
        held.add(job_id, Route(queue, priority, run_at))
    return held


def test_higher_priority_first_then_earlier_run_at():
    # Added as the timing wheel hands them over: in the order they fall due.
    held = ready((1, "q", 2, 100), (3, "q", 5, 200), (4, "q", 9, 250), (2, "q", 9, 300))
    assert held.first("q", 10, now_ms=400) == [4, 2, 3, 1]
    assert held.first("q", 2, now_ms=400) == [4, 2]


def test_first_leaves_the_jobs_until_they_are_removed():
    held = ready((1, "q", 5, 100), (2, "q", 5, 110))
    assert held.first("q", 1, now_ms=200) == [1]
    assert held.first("q", 1, now_ms=200) == [1]
    held.remove(1)
    assert held.first("q", 5, now_ms=200) == [2] and len(held) == 1 and 1 not in held


def test_queues_are_apart():
    held = ready((1, "a", 9, 100), (2, "b", 0, 100))
    assert held.queues() == ["a", "b"]
    assert held.first("b", 5, now_ms=200) == [2]
    assert held.count("a") == 1 and held.count("b", min_priority=1) == 0


def test_the_lowest_level_rises_one_level_a_minute_and_never_starves():
    """A priority-0 job due at t=0 waits behind fresh priority-9 jobs for 9 aging periods;
    from then on it comes before any job due after it."""
    old = (1, "q", 0, 0.0)
    for minutes, expected_first in [(1, 2), (8.9, 2), (9, 1), (30, 1)]:
        now = minutes * MINUTE
        fresh = (2, "q", 9, now - 1)  # a critical job that just fell due
        assert ready(old, fresh).first("q", 1, now_ms=now) == [expected_first], minutes


def test_min_priority_leaves_lower_jobs_waiting():
    held = ready((1, "q", 8, 100), (2, "q", 9, 200), (3, "q", 0, 0))
    assert held.first("q", 10, now_ms=10 * MINUTE, min_priority=9) == [2]
    assert held.count("q", min_priority=9) == 1


def test_an_added_job_moves_when_added_again():
    held = ready((1, "q", 1, 100))
    held.add(1, Route("r", 7, 100))
    assert held.queues() == ["r"] and held.first("r", 5, now_ms=200) == [1]
