"""Phase strategies and load profiles: pure, no database."""

import heapq
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasksapp.recurring import phases


@given(st.integers(min_value=0, max_value=2**70))
def test_golden_phase_is_in_the_unit_interval(ordinal):
    assert 0.0 <= phases.golden_phase(ordinal) < 1.0


def test_golden_phase_is_frac_of_ordinal_over_phi():
    inverse_phi = (math.sqrt(5) - 1) / 2
    for ordinal in (1, 2, 3, 10, 1000, 123_456):
        assert phases.golden_phase(ordinal) == pytest.approx((ordinal * inverse_phi) % 1, abs=1e-9)


def test_golden_phase_is_exact_at_ten_million():
    """The 64-bit fixed point does not drift the way ordinal * 0.618... in floats would."""
    ordinal = 10_000_000
    exact = (ordinal * phases.GOLDEN_64 % 2**64) / 2**64
    assert abs(phases.golden_phase(ordinal) - exact) < 2**-52


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_golden_phase_refuses_bad_ordinals(bad):
    with pytest.raises(ValueError, match="ordinal must be a non-negative integer"):
        phases.golden_phase(bad)


@given(st.integers(min_value=2, max_value=3000))
def test_golden_prefix_has_at_most_three_gap_lengths(count):
    """The three-gap theorem: any prefix of the sequence is spread almost evenly."""
    points = sorted(phases.golden_phase(n) for n in range(count))
    gaps = [b - a for a, b in zip(points, [*points[1:], points[0] + 1], strict=True)]
    distinct = {round(gap * count, 6) for gap in gaps}
    assert len(distinct) <= 3
    assert max(gaps) / min(gaps) <= (1 + math.sqrt(5)) / 2 + 1 + 1e-9


def test_golden_phases_of_distinct_ordinals_differ():
    values = [phases.golden_phase(n) for n in range(100_000)]
    assert len(set(values)) == len(values)


def test_random_phase_uses_the_given_generator():
    assert phases.random_phase(random.Random(7)) == random.Random(7).random()
    assert 0.0 <= phases.random_phase() < 1.0


def test_phase_for_dispatches_by_strategy():
    assert phases.phase_for("golden", ordinal=5) == phases.golden_phase(5)
    assert phases.phase_for("random", ordinal=5, rng=random.Random(1)) == random.Random(1).random()
    with pytest.raises(ValueError, match="phase strategy must be one of: golden, random"):
        phases.phase_for("sorted", ordinal=5)


def test_load_profile_counts_every_phase_once():
    counts = phases.load_profile([0.0, 0.1, 0.5, 0.99, 0.999999], buckets=10)
    assert counts == [1, 1, 0, 0, 0, 1, 0, 0, 0, 2]
    assert phases.peak_to_mean(counts) == pytest.approx(2 / 0.5)


def test_peak_to_mean_of_nothing_is_undefined():
    assert math.isnan(phases.peak_to_mean([0, 0]))


def test_golden_is_much_more_even_than_random_per_second_of_a_day():
    members, seconds = 200_000, 86_400
    golden = phases.load_profile(map(phases.golden_phase, range(members)), buckets=seconds)
    rng = random.Random(42)
    uniform = phases.load_profile((rng.random() for _ in range(members)), buckets=seconds)
    assert phases.peak_to_mean(golden) < 2.0
    assert phases.peak_to_mean(uniform) > 3.5


def _evenness(ordinals, buckets=1_000):
    return phases.peak_to_mean(
        phases.load_profile(map(phases.golden_phase, ordinals), buckets=buckets)
    )


def test_reusing_freed_ordinals_restores_evenness_after_churn():
    """Five rounds of churn (10 % deleted at random, as many created). A new member takes
    the lowest freed ordinal (as `member_create` does): the ordinals in use end as exactly
    the original prefix, as even as before. Appending new ordinals leaves the holes."""
    members = 50_000
    rng = random.Random(3)
    reused, freed = set(range(members)), []
    appended, next_ordinal = set(range(members)), members
    for _ in range(5):
        for ordinal in rng.sample(sorted(reused), members // 10):
            reused.remove(ordinal)
            heapq.heappush(freed, ordinal)
        appended -= set(rng.sample(sorted(appended), members // 10))
        for _ in range(members // 10):
            reused.add(heapq.heappop(freed))
            appended.add(next_ordinal)
            next_ordinal += 1

    assert reused == set(range(members)) and not freed
    assert _evenness(reused) < 1.05
    assert _evenness(appended) > 1.2


def test_reusing_the_lowest_freed_ordinals_first_is_more_even_than_appending():
    """30 % deleted, half as many created: the lowest freed ordinals fill the prefix."""
    members = 50_000
    rng = random.Random(3)
    removed = set(rng.sample(range(members), members * 3 // 10))
    alive = set(range(members)) - removed
    created = len(removed) // 2
    lowest_first = alive | set(sorted(removed)[:created])
    appended = alive | set(range(members, members + created))
    assert _evenness(lowest_first) < _evenness(appended) - 0.05
    assert _evenness(lowest_first) < _evenness(alive)
