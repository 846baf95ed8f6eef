"""The planner's settings (`settings.TEMPO_PLANNING`) as one typed, validated, frozen
object, read on first use and again when a test overrides them. What each setting means
is said where it is defined (schedapp/settings.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from tasksapp.engine.settings import configured
from tasksapp.recurring import phases

ERR_STRATEGY = "TEMPO_PHASE_STRATEGY must be one of: {choices} (got {value!r})."


@dataclass(frozen=True, slots=True)
class PlanningSettings:
    phase_strategy: str  # how new members get their phase: golden-ratio or random
    horizon_seconds: float  # each planner run plans the slices starting before now + this
    late_grace_seconds: float  # an occurrence this far in the past is still planned

    def __post_init__(self) -> None:
        if self.phase_strategy not in phases.STRATEGIES:
            choices = ", ".join(phases.STRATEGIES)
            raise ImproperlyConfigured(
                ERR_STRATEGY.format(choices=choices, value=self.phase_strategy)
            )

    @classmethod
    def load(cls) -> PlanningSettings:
        raw = configured("TEMPO_PLANNING")  # over its defaults
        return cls(
            phase_strategy=raw["PHASE_STRATEGY"],
            horizon_seconds=float(raw["HORIZON_SECONDS"]),
            late_grace_seconds=float(raw["LATE_GRACE_SECONDS"]),
        )


@functools.cache
def planning_settings() -> PlanningSettings:
    return PlanningSettings.load()


def _read_again(*, setting: str, **kwargs) -> None:
    if setting == "TEMPO_PLANNING":  # override_settings, as tests do
        planning_settings.cache_clear()


setting_changed.connect(_read_again, dispatch_uid="tempo-planning-settings-changed")
