"""The planner's settings: typed, checked once, read again when overridden."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from tasksapp.recurring.settings import ERR_STRATEGY, PlanningSettings, planning_settings

RAW = {"PHASE_STRATEGY": "golden", "HORIZON_SECONDS": "3600", "LATE_GRACE_SECONDS": 900}


def test_values_are_typed(settings):
    settings.TEMPO_PLANNING = RAW
    assert planning_settings() == PlanningSettings("golden", 3600.0, 900.0)


def test_an_unknown_strategy_is_refused_with_the_choices(settings):
    settings.TEMPO_PLANNING = {**RAW, "PHASE_STRATEGY": "zigzag"}
    with pytest.raises(ImproperlyConfigured) as error:
        planning_settings()
    assert str(error.value) == ERR_STRATEGY.format(choices="golden, random", value="zigzag")


def test_an_override_is_read_again(settings):
    settings.TEMPO_PLANNING = RAW
    assert planning_settings().phase_strategy == "golden"
    settings.TEMPO_PLANNING = {**RAW, "PHASE_STRATEGY": "random"}
    assert planning_settings().phase_strategy == "random"
