"""The retry policy: pure functions, no database."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasksapp.engine.retry import (
    DEFAULT_POLICY,
    ERR_POLICY_DELAYS,
    ERR_POLICY_DELAYS_CAP,
    ERR_POLICY_FACTOR,
    ERR_POLICY_NUMBER,
    ERR_POLICY_TYPE,
    ERR_POLICY_UNKNOWN,
    MAX_DELAY_SECONDS,
    MAX_DELAYS,
    RetryDecision,
    RetryPolicyError,
    base_delay,
    decide,
    validate_policy,
    worst_case_seconds,
)

DELAYS = {"delays": [1, 2, 5, 10, 20]}


def error_of(policy) -> str:
    with pytest.raises(RetryPolicyError) as caught:
        validate_policy(policy)
    return str(caught.value)


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [None, {}])
def test_no_policy_means_the_default_one(policy):
    normalised = validate_policy(policy)
    assert normalised == DEFAULT_POLICY
    normalised["base"] = 99
    assert DEFAULT_POLICY["base"] == 1.0  # a copy, never the shared default


def test_explicit_delays_are_normalised_to_floats():
    assert validate_policy(DELAYS) == {"delays": [1.0, 2.0, 5.0, 10.0, 20.0]}
    assert validate_policy({"delays": [0]}) == {"delays": [0.0]}


def test_exponential_fields_get_their_defaults():
    defaults = {"base": 2.0, "factor": 2.0, "jitter": 0.0, "cap": 3600.0}
    assert validate_policy({"base": 2}) == defaults
    assert validate_policy({"base": 0.2, "factor": 1, "jitter": 0.5, "cap": 60}) == {
        "base": 0.2,
        "factor": 1.0,
        "jitter": 0.5,
        "cap": 60.0,
    }


def test_the_error_class_is_a_value_error():
    assert issubclass(RetryPolicyError, ValueError)


@pytest.mark.parametrize("policy", [[1, 2], "1,2", 3, ("delays", [1])])
def test_a_policy_must_be_an_object(policy):
    assert error_of(policy) == ERR_POLICY_TYPE


@pytest.mark.parametrize("policy", [{"factor": 2.0}, {"jitter": 1}, {"delay": [1]}])
def test_a_policy_needs_delays_or_base(policy):
    assert error_of(policy) == ERR_POLICY_TYPE


@pytest.mark.parametrize(
    "delays", [[], None, "1,2", (1, 2), [1, -1], [1, "2"], [True], [1, None], {"a": 1}]
)
def test_bad_delays(delays):
    assert error_of({"delays": delays}) == ERR_POLICY_DELAYS


def test_unknown_keys_are_named_in_order():
    assert error_of({"delays": [1], "cap": 5, "base": 1}) == ERR_POLICY_UNKNOWN.format(
        keys="base, cap"
    )
    assert error_of({"base": 1, "retries": 3, "max": 2}) == ERR_POLICY_UNKNOWN.format(
        keys="max, retries"
    )
    assert ERR_POLICY_UNKNOWN.format(keys="max, retries") == (
        "retry_policy has unknown keys: max, retries."
    )


@pytest.mark.parametrize("field", ["base", "jitter", "cap"])
@pytest.mark.parametrize(
    "value", [-1, -0.5, "3", None, True, [1], 1e300, 10**400, float("nan"), 2_592_001]
)
def test_exponential_fields_must_be_bounded_numbers_of_seconds(field, value):
    policy = {"base": 1.0, field: value}
    assert error_of(policy) == ERR_POLICY_NUMBER.format(field=field)


@pytest.mark.parametrize("factor", [0.5, 0, -1, "2", None, True, 101, 1e300, float("nan")])
def test_the_factor_may_not_shrink_delays_or_explode(factor):
    assert error_of({"base": 1, "factor": factor}) == ERR_POLICY_FACTOR


@pytest.mark.parametrize(
    "delays", [[1e300], [10**400], [float("inf")], [2_592_001], [1] * (MAX_DELAYS + 1)]
)
def test_hostile_delays_are_refused(delays):
    assert error_of({"delays": delays}) == ERR_POLICY_DELAYS


def test_the_largest_policy_computes_bounded_delays_for_every_attempt():
    policy = validate_policy({"base": MAX_DELAY_SECONDS, "factor": 100, "cap": MAX_DELAY_SECONDS})
    delays = [base_delay(policy, n) for n in (1, 2, 200, 999)]
    assert delays == [MAX_DELAY_SECONDS] * 4
    decision = decide({**policy, "jitter": MAX_DELAY_SECONDS}, attempt=999, max_attempts=1000)
    assert decision.delay == MAX_DELAY_SECONDS


@pytest.mark.parametrize(
    "stored",
    [{"delays": [1e300]}, {"base": 1, "factor": 1e300, "cap": 1e300}, {"nonsense": 1}, "x"],
)
def test_a_stored_policy_past_the_bounds_is_computed_with_the_default(stored):
    """Policies stored before the bounds, or by hand: the failure is still recorded."""
    decision = decide(stored, attempt=1, max_attempts=3, rng=random.Random(1))
    assert decision.retry and 0 <= decision.delay <= DEFAULT_POLICY["cap"] + 1


# --- explicit delays ---------------------------------------------------------------------


def test_attempt_n_waits_the_nth_delay_and_the_last_one_repeats():
    policy = validate_policy(DELAYS)
    assert [base_delay(policy, n) for n in range(1, 9)] == [1, 2, 5, 10, 20, 20, 20, 20]


def test_decide_with_explicit_delays():
    policy = validate_policy(DELAYS)
    decisions = [decide(policy, attempt=n, max_attempts=8) for n in range(1, 8)]
    assert decisions == [RetryDecision(retry=True, delay=d) for d in [1, 2, 5, 10, 20, 20, 20]]


def test_delays_take_a_jitter_validated_and_normalised():
    policy = validate_policy({"delays": [1, 2, 5, 10, 20], "jitter": 3})
    assert policy == {"delays": [1.0, 2.0, 5.0, 10.0, 20.0], "jitter": 3.0}
    assert validate_policy({"delays": [1], "jitter": 0}) == {"delays": [1.0], "jitter": 0.0}


@pytest.mark.parametrize("jitter", [-1, "2", None, True, float("nan"), 2_592_001, [1]])
def test_a_bad_jitter_of_delays_is_refused(jitter):
    assert error_of({"delays": [1, 2], "jitter": jitter}) == ERR_POLICY_NUMBER.format(
        field="jitter"
    )


def test_delays_refuse_a_cap_and_say_why():
    assert error_of({"delays": [1, 2, 5], "jitter": 1, "cap": 4}) == ERR_POLICY_DELAYS_CAP
    assert "largest delay is its cap" in ERR_POLICY_DELAYS_CAP


@pytest.mark.parametrize("seed", range(20))
def test_each_delay_gets_its_jitter_within_bounds(seed):
    policy = validate_policy({"delays": [1, 2, 5, 10, 20], "jitter": 2})
    rng, again = random.Random(seed), random.Random(seed)
    for attempt, delay in zip(range(1, 9), [1, 2, 5, 10, 20, 20, 20, 20], strict=True):
        decision = decide(policy, attempt=attempt, max_attempts=10, rng=rng)
        assert decision == RetryDecision(True, delay + again.uniform(0, 2))
        assert delay <= decision.delay <= delay + 2


def test_delays_with_jitter_spread_retries_apart():
    policy = validate_policy({"delays": [5], "jitter": 4})
    rng = random.Random(3)
    waits = [decide(policy, attempt=1, max_attempts=2, rng=rng).delay for _ in range(200)]
    assert min(waits) >= 5 and max(waits) <= 9 and max(waits) - min(waits) > 3


def test_the_worst_case_of_delays_counts_their_jitter():
    policy = validate_policy({"delays": [1, 2, 5], "jitter": 10})
    assert worst_case_seconds(policy, max_attempts=4) == 1 + 2 + 5 + 3 * 10


@pytest.mark.parametrize("policy", [DELAYS, DEFAULT_POLICY])
def test_no_retry_once_max_attempts_is_reached(policy):
    policy = validate_policy(policy)
    assert decide(policy, attempt=3, max_attempts=3) == RetryDecision(retry=False, delay=0.0)
    assert decide(policy, attempt=4, max_attempts=3).retry is False
    assert decide(policy, attempt=1, max_attempts=1).retry is False
    assert decide(policy, attempt=2, max_attempts=3).retry is True


# --- exponential -------------------------------------------------------------------------


def test_exponential_growth_stops_at_the_cap():
    policy = validate_policy({"base": 1, "factor": 2, "cap": 300})
    assert [base_delay(policy, n) for n in range(1, 12)] == [
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        256,
        300,
        300,
    ]
    assert base_delay(policy, 200) == 300  # no overflow far down the line


def test_a_factor_of_one_is_a_constant_delay():
    policy = validate_policy({"base": 7, "factor": 1})
    assert {base_delay(policy, n) for n in range(1, 20)} == {7.0}


def test_without_jitter_the_random_source_is_untouched():
    policy = validate_policy({"base": 1, "factor": 3})
    rng = random.Random(5)
    state = rng.getstate()
    assert decide(policy, attempt=2, max_attempts=5, rng=rng) == RetryDecision(True, 3.0)
    assert rng.getstate() == state


@pytest.mark.parametrize("seed", range(20))
def test_jitter_is_added_within_its_bounds(seed):
    policy = validate_policy({"base": 1, "factor": 2, "jitter": 0.5, "cap": 10})
    for attempt in range(1, 8):
        decision = decide(policy, attempt=attempt, max_attempts=9, rng=random.Random(seed))
        expected = base_delay(policy, attempt) + random.Random(seed).uniform(0, 0.5)
        assert decision.retry is True
        assert decision.delay == expected
        assert base_delay(policy, attempt) <= decision.delay <= base_delay(policy, attempt) + 0.5


def test_the_same_seed_gives_the_same_delays():
    policy = validate_policy(DEFAULT_POLICY)
    first, second = random.Random(42), random.Random(42)
    a = [decide(policy, attempt=n, max_attempts=10, rng=first).delay for n in range(1, 10)]
    b = [decide(policy, attempt=n, max_attempts=10, rng=second).delay for n in range(1, 10)]
    assert a == b
    assert len(set(a)) == len(a)


def test_the_global_random_source_is_used_by_default():
    policy = validate_policy(DEFAULT_POLICY)  # base 1, jitter 0.5
    for _ in range(50):
        delay = decide(policy, attempt=1, max_attempts=2).delay
        assert 1.0 <= delay <= 1.5


# --- worst case --------------------------------------------------------------------------


def test_worst_case_with_explicit_delays():
    policy = validate_policy(DELAYS)
    assert worst_case_seconds(policy, max_attempts=1) == 0
    assert worst_case_seconds(policy, max_attempts=3) == 1 + 2
    assert worst_case_seconds(policy, max_attempts=7) == 1 + 2 + 5 + 10 + 20 + 20


def test_worst_case_of_three_attempts_from_200_ms():
    policy = validate_policy({"base": 0.2, "factor": 2, "jitter": 0.1, "cap": 60})
    # Two retries: (0.2 + 0.1) + (0.4 + 0.1).
    assert worst_case_seconds(policy, max_attempts=3) == pytest.approx(0.8)


def test_worst_case_counts_the_cap_and_the_full_jitter():
    policy = validate_policy(DEFAULT_POLICY)  # 1, 2, 4, ... capped at 300, jitter 0.5
    # Eleven retries: 1 + 2 + ... + 256 = 511, then 300 twice, each plus the 0.5 s of jitter.
    assert worst_case_seconds(policy, max_attempts=12) == pytest.approx(511 + 600 + 11 * 0.5)


@given(
    base=st.floats(0, 100),
    factor=st.floats(1, 4),
    jitter=st.floats(0, 5),
    cap=st.floats(0, 1_000),
    max_attempts=st.integers(1, 12),
    seed=st.integers(0, 2**32),
)
def test_no_run_of_retries_exceeds_the_worst_case(base, factor, jitter, cap, max_attempts, seed):
    policy = validate_policy({"base": base, "factor": factor, "jitter": jitter, "cap": cap})
    rng = random.Random(seed)
    total = 0.0
    attempt = 1
    while (decision := decide(policy, attempt=attempt, max_attempts=max_attempts, rng=rng)).retry:
        assert 0 <= decision.delay <= base_delay(policy, attempt) + jitter
        total += decision.delay
        attempt += 1
    assert attempt == max_attempts
    assert total <= worst_case_seconds(policy, max_attempts=max_attempts) * (1 + 1e-12)
