"""The peers bench's pure parts: the exercise's scoring and the run's plan."""

import datetime as dt
import signal

import pytest

from bench.peers.plan import make_plan
from bench.peers.scoring import MAX_DELAY_MS, passed, score

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(ms: float) -> dt.datetime:
    return T0 + dt.timedelta(milliseconds=ms)


def test_a_clean_run_scores_delays_from_execute_at():
    jobs = {1: at(0), 2: at(1000)}
    result = score(jobs, [(1, at(0), at(85)), (2, at(1001), at(1095))])
    assert result == {
        "jobs": 2,
        "executed": 2,
        "missing": 0,
        "duplicated": 0,
        "early": 0,
        "late": 0,
        "avg_ms": 90,
        "stdev_ms": 7.07,
        "efficient": 97.07,
    }
    assert passed(result)


def test_missing_duplicated_early_and_late_are_counted_once_per_job():
    jobs = {1: at(0), 2: at(0), 3: at(0), 4: at(0)}
    executions = [
        (1, at(0), at(90)),
        (1, at(5), at(95)),
        (1, at(7), at(99)),  # three runs: one duplicated job
        (2, at(-10), at(80)),  # began before run_at
        (3, at(MAX_DELAY_MS), at(MAX_DELAY_MS + 90)),
    ]
    result = score(jobs, executions)
    assert (result["missing"], result["duplicated"], result["early"], result["late"]) == (
        1,
        1,
        1,
        1,
    )
    assert not passed(result)


def test_a_duplicated_job_is_timed_by_its_first_execution():
    result = score({1: at(0)}, [(1, at(500), at(600)), (1, at(0), at(100))])
    assert (result["avg_ms"], result["duplicated"]) == (100, 1)


def test_the_average_is_truncated_like_the_exercise_sql():
    result = score({1: at(0), 2: at(0)}, [(1, at(0), at(100.4)), (2, at(0), at(100.8))])
    assert result["avg_ms"] == 100


def test_nothing_executed_scores_zero_delay_and_fails():
    result = score({1: at(0)}, [])
    assert (result["missing"], result["efficient"]) == (1, 0.0)
    assert not passed(result)


def test_an_execution_of_an_unknown_job_is_refused():
    with pytest.raises(ValueError, match="an execution of unknown job 9"):
        score({1: at(0)}, [(9, at(0), at(90))])


def test_the_plan_is_the_same_for_one_seed_and_kills_three_distinct_instances():
    plan = make_plan(duration=180, instances=5, seed=7)
    assert plan == make_plan(duration=180, instances=5, seed=7)
    assert plan != make_plan(duration=180, instances=5, seed=8)
    assert [k.signal for k in plan.kills] == [signal.SIGINT, signal.SIGKILL, signal.SIGKILL]
    assert len({k.instance for k in plan.kills}) == 3
    assert all(0 <= k.at <= 170 for k in plan.kills)
    assert [k.at for k in plan.kills] == sorted(k.at for k in plan.kills)
    assert all(0 <= s <= 9 for s in plan.starts)


def test_the_plan_holds_the_exercise_workload():
    plan = make_plan(duration=600, instances=5, seed=20190831, kills=False)
    bursts = {t for t in plan.upfront if plan.upfront.count(t) >= 20}
    assert sorted(bursts) == [13.0 * k for k in range(1, 48)]  # 20 jobs every 13 s
    assert all(due - created == pytest.approx(10.1) for created, due in plan.live)
    assert all(created + 10 < 600 for created, _ in plan.live)
    assert all(1 <= b - a <= 3 for (a, _), (b, _) in zip(plan.live, plan.live[1:], strict=False))
    assert plan.kills == []
    assert plan.jobs == len(plan.upfront) + len(plan.live)
