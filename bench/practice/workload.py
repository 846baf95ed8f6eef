"""The exercise's job generator (SchedulingPractice.PubWorker), as pure functions.

Up front: one job every 3 s, 20 jobs every 13 s, one job every 1-3 s at random, all
within [since, until). During the run: every 1-3 s (random sleep) one job due 10.1 s
later, while now + 10 s < until.
"""

from __future__ import annotations

import random


def upfront_offsets(duration: float, rng: random.Random) -> list[float]:
    """Run times, in seconds after `since`, of the jobs created before the start."""
    offsets: list[float] = []
    t = 0.0
    while t < duration:  # step 1: one job every 3 s
        t += 3
        offsets.append(t)
    t = 0.0
    while t < duration:  # step 2: 20 jobs every 13 s
        t += 13
        offsets.extend([t] * 20)
    t = 0.0
    while t < duration:  # step 3: one job every 1-3 s at random
        t += (1000 + rng.randrange(2000)) / 1000
        offsets.append(t)
    return offsets


def live_sleep(rng: random.Random) -> float:
    """Step 4: the random wait before each live job (1-3 s)."""
    return (1000 + rng.randrange(2000)) / 1000


LIVE_LEAD_SECONDS = 10.1  # a live job is due this long after it is created
