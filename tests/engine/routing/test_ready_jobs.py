"""The dispatcher's claim order (ReadyJobs) and the rate limit's arithmetic (GCRA)."""

from tasksapp.engine.dispatcher.routing import ReadyJobs, Route
from tasksapp.engine.ratelimit import gcra_allowance, gcra_next_start_ms

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


def test_gcra_lets_a_tenth_of_the_period_through_then_spreads_the_rest():
    # 200 starts per second: 20 at once (a tenth of a second's worth), then one every 5 ms.
    allowed, tat = gcra_allowance(tat_ms=None, now_ms=0, limit=200, period_ms=1000, wanted=500)
    assert allowed == 20 and tat == 100
    assert gcra_allowance(tat_ms=tat, now_ms=0, limit=200, period_ms=1000, wanted=5)[0] == 0
    assert gcra_next_start_ms(tat_ms=tat, limit=200, period_ms=1000) == 5
    allowed, tat = gcra_allowance(tat_ms=tat, now_ms=50, limit=200, period_ms=1000, wanted=500)
    assert allowed == 10 and tat == 150


def test_gcra_holds_the_rate_in_every_window():
    tat, starts = None, []
    for now in range(0, 10_000, 7):  # asked every 7 ms for more than the rate allows
        allowed, tat = gcra_allowance(tat_ms=tat, now_ms=now, limit=100, period_ms=1000, wanted=50)
        starts += [now] * allowed
    for i, start in enumerate(starts):
        in_period = [s for s in starts[i:] if s < start + 1000]
        assert len(in_period) <= 100 + 10  # the limit, and at most one burst of a tenth
    assert 1000 - 2 <= len(starts) <= 1000 + 10  # 100/s over 10 s, plus the first burst


def test_gcra_of_a_small_limit_lets_one_through_at_a_time():
    allowed, tat = gcra_allowance(tat_ms=None, now_ms=0, limit=2, period_ms=1000, wanted=5)
    assert allowed == 1 and gcra_next_start_ms(tat_ms=tat, limit=2, period_ms=1000) == 500
