"""The scheduler's settings object: typed, validated, read again when tests change them."""

import pytest

from tasksapp.engine.settings import TempoSettings, tempo_settings


def test_every_key_becomes_a_typed_field(settings):
    settings.TEMPO = {**settings.TEMPO, "PARTITIONS": 8.0}
    settings.TEMPO_TUNING = {"COORDINATION_SECONDS": 1}
    loaded = TempoSettings.load()
    assert loaded.partitions == 8 and isinstance(loaded.partitions, int)
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


def test_a_pooler_setting_must_be_known_and_without_prepared_statements(settings):
    settings.TEMPO = {**settings.TEMPO, "DB_POOLER": "statement"}
    with pytest.raises(ValueError, match="TEMPO_DB_POOLER must be empty or transaction"):
        TempoSettings.load()
    settings.TEMPO = {**settings.TEMPO, "DB_POOLER": "transaction"}
    settings.TEMPO_TUNING = {"PREPARED_STATEMENTS": True}
    with pytest.raises(ValueError, match=r"TEMPO_TUNING\['PREPARED_STATEMENTS'\] needs a session"):
        TempoSettings.load()


def test_a_dispatcher_behind_a_pooler_needs_a_direct_session_url(settings):
    pooled = {**settings.TEMPO, "DB_POOLER": "transaction"}
    settings.TEMPO = {**pooled, "SESSION_DATABASE_URL": ""}
    with pytest.raises(ValueError, match="needs TEMPO_SESSION_DATABASE_URL"):
        TempoSettings.load().check_dispatch(listen_notify=True)
    settings.TEMPO = {**pooled, "SESSION_DATABASE_URL": "postgres://tempo:pw@db.internal:5433/jobs"}
    TempoSettings.load().check_dispatch(listen_notify=True)


@pytest.mark.django_db
def test_the_session_connection_goes_to_the_direct_url_with_server_keepalives(settings):
    from tasksapp.engine.cluster.session import session_connection_params

    settings.TEMPO = {
        **settings.TEMPO,
        "SESSION_DATABASE_URL": "postgres://tempo:pw@db.internal:5433/jobs",
    }
    params = session_connection_params()
    assert (params["host"], params["port"], params["dbname"]) == ("db.internal", 5433, "jobs")
    assert (params["user"], params["password"]) == ("tempo", "pw")
    assert "tcp_keepalives_idle" in params["options"] and params["keepalives"] == 1


def test_a_deferred_start_fits_well_within_the_claim(settings):
    """A deferred start is written while the claim holds: a project that shortens the
    claim's lifetime shortens the deferral with it; a negative one is refused."""
    settings.TEMPO = {**settings.TEMPO, "CLAIM_TTL_SECONDS": 1.0}
    assert TempoSettings.load().deferred_start_seconds == 0.5
    settings.TEMPO = {**settings.TEMPO, "CLAIM_TTL_SECONDS": 10.0}
    assert TempoSettings.load().deferred_start_seconds == 1.0
    settings.TEMPO_TUNING = {"DEFERRED_START_SECONDS": -1.0}
    with pytest.raises(ValueError, match=r"TEMPO_TUNING\['DEFERRED_START_SECONDS'\] must be"):
        TempoSettings.load()
