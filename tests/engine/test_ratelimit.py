"""The rate limit's arithmetic (GCRA): the burst, the spacing, and — for any pattern of
claims — never more than limit + burst - 1 starts in a period, and no start lost while
the claims come at most a burst's worth of time apart."""

from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st

from tasksapp.engine.ratelimit import (
    gcra_allowance,
    gcra_batch,
    gcra_burst,
    gcra_next_start_ms,
)


def claims(limit: int, period_ms: float, asks: list[tuple[float, int]]) -> list[float]:
    """The start times a claimer gets asking at each (time, wanted), in order."""
    tat, starts = None, []
    for now, wanted in asks:
        allowed, tat = gcra_allowance(
            tat_ms=tat, now_ms=now, limit=limit, period_ms=period_ms, wanted=wanted
        )
        starts += [now] * allowed
    return starts


def most_in_a_period(starts: list[float], period_ms: float) -> int:
    """The most starts in any half-open window [t, t + period) (starts in order)."""
    return max((bisect_left(starts, t + period_ms) - i for i, t in enumerate(starts)), default=0)


def test_a_quarter_of_the_period_goes_at_once_then_one_start_per_interval():
    # 200 starts per second: 50 at once (a quarter of a second's worth), then one every 5 ms.
    allowed, tat = gcra_allowance(tat_ms=None, now_ms=0, limit=200, period_ms=1000, wanted=500)
    assert allowed == 50 and tat == 250
    assert gcra_allowance(tat_ms=tat, now_ms=0, limit=200, period_ms=1000, wanted=5)[0] == 0
    assert gcra_next_start_ms(tat_ms=tat, limit=200, period_ms=1000) == 5
    allowed, tat = gcra_allowance(tat_ms=tat, now_ms=50, limit=200, period_ms=1000, wanted=500)
    assert allowed == 10 and tat == 300


def test_the_dispatcher_looks_again_when_a_batch_has_accrued():
    assert gcra_burst(200) == 50 and gcra_batch(200) == 10
    assert gcra_next_start_ms(tat_ms=250, limit=200, period_ms=1000, starts=10) == 50
    allowed, _ = gcra_allowance(tat_ms=250, now_ms=50, limit=200, period_ms=1000, wanted=99)
    assert allowed == 10


def test_a_small_limit_lets_one_through_at_a_time():
    assert gcra_burst(2) == 1 and gcra_batch(2) == 1
    allowed, tat = gcra_allowance(tat_ms=None, now_ms=0, limit=2, period_ms=1000, wanted=5)
    assert allowed == 1 and gcra_next_start_ms(tat_ms=tat, limit=2, period_ms=1000) == 500


def test_a_claimer_late_by_less_than_a_burst_loses_no_start_over_a_minute():
    """200/s asked every 20 ms, but every tenth turn 200 ms late: 12,000 in a minute, give
    or take the first burst (a bucket of a tenth, as before, gives 8,848: 147/s)."""
    asks, now = [], 0.0
    for turn in range(3000):
        asks.append((now, 10_000))
        now += 200 if turn % 10 == 9 else 20
        if now > 60_000:
            break
    starts = claims(200, 1000, asks)
    in_minute = sum(1 for s in starts if s < 60_000)
    assert 12_000 <= in_minute <= 12_000 + 50


limits = st.integers(min_value=1, max_value=500)
periods = st.sampled_from([1.0, 100.0, 1000.0, 60_000.0])
gaps = st.lists(
    st.tuples(st.floats(min_value=0, max_value=2000), st.integers(min_value=0, max_value=600)),
    min_size=1,
    max_size=200,
)


def timeline(pairs: list[tuple[float, int]]) -> list[tuple[float, int]]:
    now, asks = 0.0, []
    for gap, wanted in pairs:
        now += gap
        asks.append((now, wanted))
    return asks


@settings(max_examples=200, deadline=None)
@given(limit=limits, period=periods, pairs=gaps)
def test_no_period_ever_holds_more_than_the_limit_and_one_burst(limit, period, pairs):
    starts = claims(limit, period, timeline(pairs))
    assert most_in_a_period(starts, period) <= limit + gcra_burst(limit) - 1


@settings(max_examples=200, deadline=None)
@given(
    limit=limits,
    period=periods,
    fractions=st.lists(st.floats(min_value=0, max_value=1), min_size=2, max_size=200),
)
def test_claims_at_most_a_burst_apart_hold_the_average(limit, period, fractions):
    """Asked for more than allowed, never more than (burst - 1) intervals apart: every
    interval since the first claim has its start (no start is lost to a late claim)."""
    interval = period / limit
    most_apart = (gcra_burst(limit) - 1) * interval
    asks = timeline([(f * most_apart, 10 * limit) for f in fractions])
    starts = claims(limit, period, asks)
    elapsed = asks[-1][0] - asks[0][0]
    assert len(starts) >= elapsed / interval
    assert len(starts) <= elapsed / interval + gcra_burst(limit) + 1e-6


@given(
    limit=limits,
    period=periods,
    tat=st.floats(min_value=0, max_value=1e6),
    starts=st.integers(min_value=1, max_value=50),
)
def test_the_next_start_named_conforms_and_not_earlier(limit, period, tat, starts):
    starts = min(starts, gcra_burst(limit))
    at = gcra_next_start_ms(tat_ms=tat, limit=limit, period_ms=period, starts=starts)
    allowed, _ = gcra_allowance(tat_ms=tat, now_ms=at, limit=limit, period_ms=period, wanted=99999)
    assert allowed >= starts
    early = at - period / limit / 2
    allowed, _ = gcra_allowance(
        tat_ms=tat, now_ms=early, limit=limit, period_ms=period, wanted=99999
    )
    assert allowed < starts or early < tat - gcra_burst(limit) * period / limit
