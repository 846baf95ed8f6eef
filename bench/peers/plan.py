"""The run every scheduler gets, as pure data: the exercise's workload (bench/practice's
generator), when each of the 5 instances starts, and which 3 are stopped when (one
SIGINT, two SIGKILL). One seed gives the same plan to every scheduler of a run."""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass

from bench.practice.workload import LIVE_LEAD_SECONDS, live_sleep, upfront_offsets

KILL_SIGNALS = (signal.SIGINT, signal.SIGKILL, signal.SIGKILL)


@dataclass(frozen=True)
class Kill:
    at: float  # seconds after the workload's start (`since`)
    instance: int
    signal: int


@dataclass(frozen=True)
class Plan:
    duration: float
    upfront: list[float]  # run times, seconds after `since`
    live: list[tuple[float, float]]  # (created, due), seconds after `since`
    starts: list[float]  # each instance's start, seconds after the launch
    kills: list[Kill]

    @property
    def jobs(self) -> int:
        return len(self.upfront) + len(self.live)


def make_plan(*, duration: float, instances: int, seed: int, kills: bool = True) -> Plan:
    rng = random.Random(seed)
    upfront = upfront_offsets(duration, rng)
    starts = [rng.uniform(0, 9) for _ in range(instances)]
    victims = rng.sample(range(instances), len(KILL_SIGNALS)) if kills else []
    moments = sorted(rng.uniform(0, duration - 10) for _ in victims)
    return Plan(
        duration=duration,
        upfront=upfront,
        live=live_jobs(duration, rng),
        starts=starts,
        kills=[Kill(at, i, s) for at, i, s in zip(moments, victims, KILL_SIGNALS, strict=False)],
    )


def live_jobs(duration: float, rng: random.Random) -> list[tuple[float, float]]:
    """Step 4 of the exercise, drawn ahead so every scheduler gets the same live jobs:
    after each 1-3 s wait, one job due 10.1 s later, while created + 10 s < the end."""
    jobs = []
    created = live_sleep(rng)
    while created + 10 < duration:
        jobs.append((created, created + LIVE_LEAD_SECONDS))
        created += live_sleep(rng)
    return jobs
