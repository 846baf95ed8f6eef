"""The retry policy: pure functions that decide when the next attempt runs.

A policy is a small JSON-able dict stored on the job:

- explicit delays: ``{"delays": [1, 2, 5, 10, 20]}`` — attempt n waits delays[n-1]
  (the last delay repeats if attempts remain);
- exponential: ``{"base": 1.0, "factor": 2.0, "jitter": 0.5, "cap": 300}`` — attempt n
  waits ``min(cap, base * factor ** (n - 1)) + uniform(0, jitter)``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_POLICY: dict[str, Any] = {"base": 1.0, "factor": 2.0, "jitter": 0.5, "cap": 300.0}

ERR_POLICY_TYPE = "retry_policy must be an object with either 'delays' or 'base'."
ERR_POLICY_DELAYS = "retry_policy.delays must be a non-empty list of non-negative numbers."
ERR_POLICY_NUMBER = "retry_policy.{field} must be a non-negative number."
ERR_POLICY_FACTOR = "retry_policy.factor must be at least 1."
ERR_POLICY_UNKNOWN = "retry_policy has unknown keys: {keys}."


class RetryPolicyError(ValueError):
    pass


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay: float = 0.0


def _number(policy: Mapping[str, Any], field: str, default: float) -> float:
    value = policy.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise RetryPolicyError(ERR_POLICY_NUMBER.format(field=field))
    return float(value)


def validate_policy(policy: Any) -> dict[str, Any]:
    """Return a normalised copy of ``policy`` or raise RetryPolicyError."""
    if policy is None or policy == {}:
        return dict(DEFAULT_POLICY)
    if not isinstance(policy, Mapping):
        raise RetryPolicyError(ERR_POLICY_TYPE)
    if "delays" in policy:
        unknown = set(policy) - {"delays"}
        if unknown:
            raise RetryPolicyError(ERR_POLICY_UNKNOWN.format(keys=", ".join(sorted(unknown))))
        delays = policy["delays"]
        valid = (
            isinstance(delays, list)
            and delays
            and all(
                not isinstance(d, bool) and isinstance(d, int | float) and d >= 0 for d in delays
            )
        )
        if not valid:
            raise RetryPolicyError(ERR_POLICY_DELAYS)
        return {"delays": [float(d) for d in delays]}
    if "base" not in policy:
        raise RetryPolicyError(ERR_POLICY_TYPE)
    unknown = set(policy) - {"base", "factor", "jitter", "cap"}
    if unknown:
        raise RetryPolicyError(ERR_POLICY_UNKNOWN.format(keys=", ".join(sorted(unknown))))
    normalised = {
        "base": _number(policy, "base", 1.0),
        "factor": _number(policy, "factor", 2.0),
        "jitter": _number(policy, "jitter", 0.0),
        "cap": _number(policy, "cap", 3600.0),
    }
    if normalised["factor"] < 1:
        raise RetryPolicyError(ERR_POLICY_FACTOR)
    return normalised


def base_delay(policy: Mapping[str, Any], attempt: int) -> float:
    """Delay after failed attempt number ``attempt`` (1-based), without jitter."""
    if "delays" in policy:
        delays = policy["delays"]
        return float(delays[min(attempt, len(delays)) - 1])
    raw = policy["base"] * policy["factor"] ** (attempt - 1)
    return float(min(policy["cap"], raw))


def decide(
    policy: Mapping[str, Any], *, attempt: int, max_attempts: int, rng: random.Random | None = None
) -> RetryDecision:
    """After attempt number ``attempt`` failed: retry, and after how many seconds?"""
    if attempt >= max_attempts:
        return RetryDecision(retry=False)
    jitter = float(policy.get("jitter", 0.0))
    extra = (rng or random).uniform(0, jitter) if jitter else 0.0
    return RetryDecision(retry=True, delay=base_delay(policy, attempt) + extra)


def worst_case_seconds(policy: Mapping[str, Any], *, max_attempts: int) -> float:
    """Longest time from the first failure to the last retry's start: a recurring task's
    period must exceed it, or an occurrence could still be retrying when the next is due."""
    jitter = float(policy.get("jitter", 0.0))
    return sum(base_delay(policy, n) + jitter for n in range(1, max_attempts))
