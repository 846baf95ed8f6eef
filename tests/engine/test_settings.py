"""The scheduler's settings object: typed, validated, read again when tests change them."""

import pytest

from tasksapp.engine.settings import TempoSettings, tempo_settings


def test_every_key_becomes_a_typed_field(settings):
    settings.TEMPO = {**settings.TEMPO, "POLL_LIMIT": 50.0, "COORDINATION_SECONDS": 1}
    loaded = TempoSettings.load()
    assert loaded.poll_limit == 50 and isinstance(loaded.poll_limit, int)
    assert loaded.coordination_seconds == 1.0 and isinstance(loaded.coordination_seconds, float)
    assert loaded.queue == settings.TEMPO["QUEUE"]


def test_an_unknown_dispatch_mode_is_refused(settings):
    settings.TEMPO = {**settings.TEMPO, "DISPATCH_MODE": "kafka"}
    with pytest.raises(ValueError, match="TEMPO_DISPATCH_MODE must be database or redis"):
        TempoSettings.load()


def test_with_notifications_the_lookahead_stays_within_the_notify_window(settings):
    settings.TEMPO = {**settings.TEMPO, "LOOKAHEAD_SECONDS": 901.0, "DISPATCH_MODE": "redis"}
    loaded = TempoSettings.load()
    with pytest.raises(ValueError, match="must not exceed the notify window"):
        loaded.check_dispatch(listen_notify=True)
    with pytest.raises(ValueError, match="redis needs PostgreSQL"):
        loaded.check_dispatch(listen_notify=False)


def test_the_process_wide_settings_are_read_again_after_an_override(settings):
    before = tempo_settings()
    assert tempo_settings() is before  # read once
    settings.TEMPO = {**settings.TEMPO, "BATCH_PARALLELISM": before.batch_parallelism + 1}
    assert tempo_settings().batch_parallelism == before.batch_parallelism + 1
