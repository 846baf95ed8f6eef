"""The schedule planner's settings (`settings.TEMPO_SCHEDULES`, each key optional) as one
typed, frozen object, read on first use and again when a test overrides them."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.conf import settings as django_settings
from django.core.signals import setting_changed


@dataclass(frozen=True, slots=True)
class ScheduleSettings:
    # Each planner run decides the fire times up to now + this (the beat runs it every
    # minute, so a fire's job exists minutes before it is due and starts at its instant).
    horizon_seconds: float = 300.0
    # A fire time found this far in the past is still planned as usual; further back it
    # was missed (downtime) and the schedule's catch-up policy decides.
    late_grace_seconds: float = 10.0
    # At most this many fire times of one schedule are decided per pass (a catch-up of a
    # long gap takes several passes).
    fires_per_pass: int = 1000
    # Schedules planned per transaction.
    batch_size: int = 500
    # Runs decided longer ago are removed by the planner's beat task (their jobs are
    # retention's).
    runs_kept_days: float = 30.0

    @classmethod
    def load(cls) -> ScheduleSettings:
        raw = getattr(django_settings, "TEMPO_SCHEDULES", {})
        defaults = cls()
        return cls(
            horizon_seconds=float(raw.get("HORIZON_SECONDS", defaults.horizon_seconds)),
            late_grace_seconds=float(raw.get("LATE_GRACE_SECONDS", defaults.late_grace_seconds)),
            fires_per_pass=int(raw.get("FIRES_PER_PASS", defaults.fires_per_pass)),
            batch_size=int(raw.get("BATCH_SIZE", defaults.batch_size)),
            runs_kept_days=float(raw.get("RUNS_KEPT_DAYS", defaults.runs_kept_days)),
        )


@functools.cache
def schedule_settings() -> ScheduleSettings:
    return ScheduleSettings.load()


def _read_again(*, setting: str, **kwargs) -> None:
    if setting == "TEMPO_SCHEDULES":
        schedule_settings.cache_clear()


setting_changed.connect(_read_again, dispatch_uid="tempo-schedule-settings-changed")
