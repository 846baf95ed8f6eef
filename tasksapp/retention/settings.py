"""Retention's settings (`settings.TEMPO_RETENTION`) as one typed, validated, frozen
object, read on first use and again when a test overrides them. What each setting means
is said where it is defined (schedapp/settings.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from tasksapp.engine.models import FINAL_STATES
from tasksapp.engine.settings import configured

ERR_DAYS = "TEMPO_RETENTION: {name} must be a number of days > 0 (got {value!r})."
ERR_HANDLER = (
    "TEMPO_RETENTION_HANDLER_DAYS: {handler!r} must map finished states "
    "({states}) to days > 0 (got {value!r})."
)
ERR_BATCH = "TEMPO_RETENTION_BATCH_SIZE must be between 1 and 100000 (got {value!r})."
ERR_REINDEX_BLOAT = "TEMPO_RETENTION_REINDEX_BLOAT must be 0 (never) or >= 1.2 (got {value!r})."
ERR_REINDEX_MIN = "TEMPO_RETENTION_REINDEX_MIN_MB must be >= 0 (got {value!r})."


def _days(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ImproperlyConfigured(ERR_DAYS.format(name=name, value=value))
    return float(value)


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    job_days: dict[str, float]  # finished state → days a job is kept after it finished
    handler_days: dict[str, dict[str, float]] = field(default_factory=dict)  # overrides
    slice_plan_days: float = 30.0
    graph_run_days: float = 30.0
    audit_days: float = 365.0
    heartbeat_days: float = 7.0
    counter_days: float = 14.0
    minute_rollup_days: float = 14.0
    hour_rollup_days: float = 400.0
    rollup_delay_seconds: float = 300.0
    batch_size: int = 1000
    batch_pause_seconds: float = 0.05
    reindex_bloat: float = 1.5  # rebuild an index this many times its fresh size; 0: never
    reindex_min_mb: float = 32.0

    def __post_init__(self) -> None:
        if set(self.job_days) != set(FINAL_STATES):
            raise ImproperlyConfigured(ERR_DAYS.format(name="job ages", value=self.job_days))
        for state, days in self.job_days.items():
            _days(f"{state} days", days)
        for handler, ages in self.handler_days.items():
            if not isinstance(ages, dict) or not ages or not set(ages) <= set(FINAL_STATES):
                raise ImproperlyConfigured(
                    ERR_HANDLER.format(handler=handler, states=", ".join(FINAL_STATES), value=ages)
                )
            for state, days in ages.items():
                _days(f"{handler} {state} days", days)
        if not 1 <= self.batch_size <= 100_000:
            raise ImproperlyConfigured(ERR_BATCH.format(value=self.batch_size))
        if not (self.reindex_bloat == 0 or self.reindex_bloat >= 1.2):
            raise ImproperlyConfigured(ERR_REINDEX_BLOAT.format(value=self.reindex_bloat))
        if not self.reindex_min_mb >= 0:
            raise ImproperlyConfigured(ERR_REINDEX_MIN.format(value=self.reindex_min_mb))

    @classmethod
    def load(cls) -> RetentionSettings:
        raw = configured("TEMPO_RETENTION")  # over its defaults
        return cls(
            job_days={state: float(raw[f"{state.upper()}_DAYS"]) for state in FINAL_STATES},
            handler_days=dict(raw["HANDLER_DAYS"]),
            slice_plan_days=float(raw["SLICE_PLAN_DAYS"]),
            graph_run_days=float(raw["GRAPH_RUN_DAYS"]),
            audit_days=float(raw["AUDIT_DAYS"]),
            heartbeat_days=float(raw["HEARTBEAT_DAYS"]),
            counter_days=float(raw["COUNTER_DAYS"]),
            minute_rollup_days=float(raw["MINUTE_ROLLUP_DAYS"]),
            hour_rollup_days=float(raw["HOUR_ROLLUP_DAYS"]),
            rollup_delay_seconds=float(raw["ROLLUP_DELAY_SECONDS"]),
            batch_size=int(raw["BATCH_SIZE"]),
            batch_pause_seconds=float(raw["BATCH_PAUSE_SECONDS"]),
            reindex_bloat=float(raw["REINDEX_BLOAT"]),
            reindex_min_mb=float(raw["REINDEX_MIN_MB"]),
        )


@functools.cache
def retention_settings() -> RetentionSettings:
    return RetentionSettings.load()


def _read_again(*, setting: str, **kwargs) -> None:
    if setting == "TEMPO_RETENTION":  # override_settings, as tests do
        retention_settings.cache_clear()


setting_changed.connect(_read_again, dispatch_uid="tempo-retention-settings-changed")
