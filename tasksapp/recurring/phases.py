"""Phase strategies: where in the period [0, 1) a new member runs, decided once.

- ``golden`` (default): the golden-ratio (Kronecker) sequence over the member's ordinal,
  ``frac(ordinal / φ)``. Any prefix 0..n-1 of it splits [0, 1) into gaps of at most three
  lengths, so the load is as even as it can be for every member count. A deleted member's
  ordinal is handed to the next member created, so the set of ordinals in use stays a
  prefix and the evenness survives churn; nobody else's phase ever changes.
- ``random``: a uniform random number, as the probabilistic planning
  article proposes. Even only on average: per second,
  the busiest bucket of a day is several times the mean.

Also here: the load profile of a set of phases, used by tests and the benchmark.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

GOLDEN = "golden"
RANDOM = "random"
STRATEGIES = (GOLDEN, RANDOM)

# round(2**64 / φ): multiplying by it modulo 2**64 is frac(n / φ) in 64-bit fixed point,
# exact for any ordinal (no floating-point drift at 10 million members).
GOLDEN_64 = 0x9E3779B97F4A7C15
_MASK_64 = (1 << 64) - 1

ERR_STRATEGY = "phase strategy must be one of: {choices} (got {value!r})."
ERR_ORDINAL = "ordinal must be a non-negative integer."

_system_random = random.SystemRandom()


def golden_phase(ordinal: int) -> float:
    """frac(ordinal / φ) in [0, 1), exactly reproducible from the ordinal."""
    if isinstance(ordinal, bool) or not isinstance(ordinal, int) or ordinal < 0:
        raise ValueError(ERR_ORDINAL)
    # The top 53 bits are exactly representable as a float: the result is never 1.0.
    return (((ordinal * GOLDEN_64) & _MASK_64) >> 11) / 2**53


def random_phase(rng: random.Random | None = None) -> float:
    """A uniform phase in [0, 1)."""
    return (rng or _system_random).random()


def phase_for(strategy: str, *, ordinal: int, rng: random.Random | None = None) -> float:
    """The phase a new member with ``ordinal`` gets under ``strategy``."""
    if strategy == GOLDEN:
        return golden_phase(ordinal)
    if strategy == RANDOM:
        return random_phase(rng)
    raise ValueError(ERR_STRATEGY.format(choices=", ".join(STRATEGIES), value=strategy))


def load_profile(phases: Iterable[float], *, buckets: int) -> list[int]:
    """How many members run in each of ``buckets`` equal parts of the period."""
    counts = [0] * buckets
    for phase in phases:
        counts[min(int(phase * buckets), buckets - 1)] += 1
    return counts


def peak_to_mean(counts: Sequence[int]) -> float:
    """The busiest bucket relative to the average one (1.0 is perfectly even)."""
    total = sum(counts)
    if not counts or not total:
        return math.nan
    return max(counts) * len(counts) / total


def task_shift(task_id: int) -> float:
    """How far a task shifts its members' phases: the golden-ratio sequence over task
    ids, so tasks of the same period spread apart (and a member in two tasks does not run
    for both at the same instant) as evenly as members do."""
    return golden_phase(task_id)


def shifted_phase(phase: float, shift: float) -> float:
    """(phase + shift) mod 1, in the same float8 steps as sql.AUDIENCE_JOIN."""
    total = phase + shift
    return total - 1 if total >= 1 else total
