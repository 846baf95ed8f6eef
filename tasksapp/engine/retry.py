"""The retry policy: pure functions that decide when the next attempt runs.

A policy is a small JSON-able dict stored on the job:

- explicit delays: ``{"delays": [1, 2, 5, 10, 20], "jitter": 2}`` — attempt n waits
  ``delays[n-1] + uniform(0, jitter)`` (the last delay repeats if attempts remain; jitter
  is optional, 0 by default). No ``cap``: the list's largest delay is its cap;
- exponential: ``{"base": 1.0, "factor": 2.0, "jitter": 0.5, "cap": 300}`` — attempt n
  waits ``min(cap, base * factor ** (n - 1)) + uniform(0, jitter)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_POLICY: dict[str, Any] = {"base": 1.0, "factor": 2.0, "jitter": 0.5, "cap": 300.0}

# Bounds that keep every computed run time a real timestamp: one job's policy can never
# make recording its failure raise (and so take its batch with it).
MAX_DELAY_SECONDS = 30 * 24 * 3600.0
MAX_DELAYS = 100
MAX_FACTOR = 100.0

ERR_POLICY_TYPE = "retry_policy must be an object with either 'delays' or 'base'."
ERR_POLICY_DELAYS = (
    "retry_policy.delays must be a non-empty list of at most 100 numbers of seconds,"
    " each between 0 and 2592000 (30 days)."
)
ERR_POLICY_NUMBER = (
    "retry_policy.{field} must be a number of seconds between 0 and 2592000 (30 days)."
)
ERR_POLICY_FACTOR = "retry_policy.factor must be a number between 1 and 100."
ERR_POLICY_UNKNOWN = "retry_policy has unknown keys: {keys}."
ERR_POLICY_DELAYS_CAP = (
    "retry_policy.cap bounds an exponential policy ('base'); a delays list takes 'delays'"
    " and 'jitter' only: its largest delay is its cap."
)


class RetryPolicyError(ValueError):
    pass


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay: float = 0.0


def _is_seconds(value: Any, high: float = MAX_DELAY_SECONDS) -> bool:
    """A number in [0, high]; NaN and integers too large for a float are not."""
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value <= high


def _number(policy: Mapping[str, Any], field: str, default: float) -> float:
    value = policy.get(field, default)
    if not _is_seconds(value):
        raise RetryPolicyError(ERR_POLICY_NUMBER.format(field=field))
    return float(value)


def validate_policy(policy: Any) -> dict[str, Any]:
    """Return a normalised copy of ``policy`` or raise RetryPolicyError."""
    if policy is None or policy == {}:
        return dict(DEFAULT_POLICY)
    if not isinstance(policy, Mapping):
        raise RetryPolicyError(ERR_POLICY_TYPE)
    if "delays" in policy:
        return _validated_delays(policy)
    if "base" not in policy:
        raise RetryPolicyError(ERR_POLICY_TYPE)
    unknown = set(policy) - {"base", "factor", "jitter", "cap"}
    if unknown:
        raise RetryPolicyError(ERR_POLICY_UNKNOWN.format(keys=", ".join(sorted(unknown))))
    factor = policy.get("factor", 2.0)
    if not _is_seconds(factor, MAX_FACTOR) or factor < 1:
        raise RetryPolicyError(ERR_POLICY_FACTOR)
    return {
        "base": _number(policy, "base", 1.0),
        "factor": float(factor),
        "jitter": _number(policy, "jitter", 0.0),
        "cap": _number(policy, "cap", 3600.0),
    }


def _validated_delays(policy: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(policy) - {"delays", "jitter"}
    if unknown == {"cap"}:
        raise RetryPolicyError(ERR_POLICY_DELAYS_CAP)
    if unknown:
        raise RetryPolicyError(ERR_POLICY_UNKNOWN.format(keys=", ".join(sorted(unknown))))
    delays = policy["delays"]
    valid = (
        isinstance(delays, list)
        and 0 < len(delays) <= MAX_DELAYS
        and all(_is_seconds(d) for d in delays)
    )
    if not valid:
        raise RetryPolicyError(ERR_POLICY_DELAYS)
    normalised: dict[str, Any] = {"delays": [float(d) for d in delays]}
    if "jitter" in policy:
        normalised["jitter"] = _number(policy, "jitter", 0.0)
    return normalised


def base_delay(policy: Mapping[str, Any], attempt: int) -> float:
    """Delay after failed attempt number ``attempt`` (1-based), without jitter, at most
    MAX_DELAY_SECONDS."""
    if "delays" in policy:
        delays = policy["delays"]
        return _clamped(delays[min(attempt, len(delays)) - 1])
    try:
        raw = policy["base"] * policy["factor"] ** (attempt - 1)
    except OverflowError:
        raw = math.inf
    return _clamped(min(policy["cap"], raw))


def _clamped(seconds: float) -> float:
    seconds = float(seconds)
    return min(seconds, MAX_DELAY_SECONDS) if seconds >= 0 else 0.0  # NaN: at once


def usable_policy(policy: Any) -> dict[str, Any]:
    """The policy to compute with: a stored policy that no longer validates (written
    before the bounds, or by hand) is replaced by the default one, never raised."""
    try:
        return validate_policy(policy)
    except RetryPolicyError:
        return dict(DEFAULT_POLICY)


def decide(
    policy: Mapping[str, Any], *, attempt: int, max_attempts: int, rng: random.Random | None = None
) -> RetryDecision:
    """After attempt number ``attempt`` failed: retry, and after how many seconds?"""
    if attempt >= max_attempts:
        return RetryDecision(retry=False)
    policy = usable_policy(policy)
    jitter = policy.get("jitter", 0.0)
    extra = (rng or random).uniform(0, jitter) if jitter else 0.0
    return RetryDecision(retry=True, delay=_clamped(base_delay(policy, attempt) + extra))


def worst_case_seconds(policy: Mapping[str, Any], *, max_attempts: int) -> float:
    """Longest time from the first failure to the last retry's start: a recurring task's
    period must exceed it, or an occurrence could still be retrying when the next is due."""
    jitter = float(policy.get("jitter", 0.0))
    return sum(base_delay(policy, n) + jitter for n in range(1, max_attempts))
