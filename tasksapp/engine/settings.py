"""The scheduler's settings (`settings.TEMPO`) as one typed, validated, frozen object.

Engine process objects read them once, when they are built: the dispatcher loop takes a
`TempoSettings` at construction, the worker's per-process objects take `tempo_settings()`
(read on first use, read again when a test overrides `settings.TEMPO`). Every key has a
default (`DEFAULTS`): a project sets only the keys it changes. What each setting means is
said in the README ("Settings") and where the standalone deployment reads it from its
environment (schedapp/settings.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from tasksapp.engine.tuning import TUNING_DEFAULTS

DISPATCH_MODES = ("database", "redis")
# Jobs inserted or re-scheduled to run within this window are announced by the jobs
# table's NOTIFY trigger (migration 0002): a dispatcher's lookahead must not exceed it.
NOTIFY_WINDOW_SECONDS = 900
DB_POOLERS = ("", "transaction")
REDIS_SCHEMES = ("redis://", "rediss://")
DEFAULT_QUEUE = "default"  # the queue of a job that names none (tasksapp.engine.options)
_TYPES = {"bool": bool, "float": float, "int": int, "str": str}
ERR_UNKNOWN_KEYS = "{setting} has unknown keys: {unknown}. Known keys: {known}."
ERR_TUNING_KEYS = (
    "{setting} sets {tunings}: the engine's tunings are not settings "
    "(tasksapp/engine/tuning.py says what each was measured with); remove them."
)
ERR_NOT_A_DICT = "{setting} must be a dict of keys to values, not {kind}."

# Every key of `settings.TEMPO` and its value when a project leaves it out. Two are
# derived when empty (see TempoSettings.load): INDEX_REDIS_URL (the Redis broker's URL)
# and INDEX_PREFIX ("<QUEUE>:"). The engine's tunings are not settings (tuning.py).
DEFAULTS: dict[str, object] = {
    "LOOKAHEAD_SECONDS": 300.0,
    "DISPATCH_NOTIFY": True,
    "NOTIFY_OFF_POLL_SECONDS": 5.0,
    "PARTITIONS": 16,
    "DISPATCH_LEAD_MS": 40,
    "CRITICAL_LEAD_MS": 100,
    "CLAIM_TTL_SECONDS": 10.0,
    "RUN_LEASE_SECONDS": 6.0,
    "WORKER_WATCH": True,
    "DEFAULT_TIME_LIMIT_SECONDS": 300.0,
    "BATCH_PARALLELISM": 1,
    "QUEUE": "tempo",
    "DB_POOLER": "",
    "SESSION_DATABASE_URL": "",
    "DISPATCH_MODE": "database",
    "INDEX_REDIS_URL": "",
    "INDEX_PREFIX": "",
    "MAX_PAYLOAD_BYTES": 1_048_576,
    "MAX_RESULT_BYTES": 1_048_576,
    "MAX_JSON_DEPTH": 32,
    "PRIORITY_AGING_SECONDS": 60.0,
    "DEGRADED_BACKLOG": 0,
    "DEGRADED_AFTER_SECONDS": 30.0,
}
# The planner's (tasksapp.recurring) and retention's (tasksapp.retention) settings.
PLANNING_DEFAULTS: dict[str, object] = {
    "PHASE_STRATEGY": "golden",
    "HORIZON_SECONDS": 26 * 3600.0,
    "LATE_GRACE_SECONDS": 900.0,
}
RETENTION_DEFAULTS: dict[str, object] = {
    "SUCCEEDED_DAYS": 7.0,
    "CANCELLED_DAYS": 30.0,
    "DEAD_DAYS": 30.0,
    "LOST_DAYS": 30.0,
    "HANDLER_DAYS": {},
    "SLICE_PLAN_DAYS": 30.0,
    "GRAPH_RUN_DAYS": 30.0,
    "AUDIT_DAYS": 365.0,
    "HEARTBEAT_DAYS": 7.0,
    "COUNTER_DAYS": 14.0,
    "MINUTE_ROLLUP_DAYS": 14.0,
    "HOUR_ROLLUP_DAYS": 400.0,
    "ROLLUP_DELAY_SECONDS": 300.0,
    "BATCH_SIZE": 1000,
    "BATCH_PAUSE_SECONDS": 0.05,
    "REINDEX_BLOAT": 1.5,
    "REINDEX_MIN_MB": 32.0,
}
SETTING_DEFAULTS = {
    "TEMPO": DEFAULTS,
    "TEMPO_PLANNING": PLANNING_DEFAULTS,
    "TEMPO_RETENTION": RETENTION_DEFAULTS,
    "TEMPO_TUNING": TUNING_DEFAULTS,
}


def configured(setting: str) -> dict[str, object]:
    """`settings.<setting>` (TEMPO, TEMPO_PLANNING or TEMPO_RETENTION) over its defaults:
    the keys a project sets, the defaults for the others. An unknown key (a typo) is an
    error, not a setting silently ignored."""
    defaults = SETTING_DEFAULTS[setting]
    given = getattr(django_settings, setting, None) or {}
    if not isinstance(given, dict):
        raise ImproperlyConfigured(ERR_NOT_A_DICT.format(setting=setting, kind=type(given)))
    unknown = sorted(set(given) - set(defaults))
    tunings = [key for key in unknown if setting == "TEMPO" and key in TUNING_DEFAULTS]
    if tunings:
        raise ImproperlyConfigured(
            ERR_TUNING_KEYS.format(setting=setting, tunings=", ".join(tunings))
        )
    if unknown:
        raise ImproperlyConfigured(
            ERR_UNKNOWN_KEYS.format(
                setting=setting, unknown=", ".join(unknown), known=", ".join(defaults)
            )
        )
    return {**defaults, **given}


@dataclass(frozen=True, slots=True)
class TempoSettings:
    """`settings.TEMPO` and the engine's tunings (`tuning.py`): one field per key, named
    as the key in lower case."""

    lookahead_seconds: float
    poll_interval_seconds: float
    dispatch_notify: bool
    notify_off_poll_seconds: float
    partitions: int
    coordination_seconds: float
    dispatch_lead_ms: int
    critical_lead_ms: int
    claim_ttl_seconds: float
    run_lease_seconds: float
    deferred_start_seconds: float
    worker_check_seconds: float
    worker_watch: bool
    default_time_limit_seconds: float
    max_batch: int
    fanout: int
    batch_parallelism: int
    transaction_group_ms: float
    max_queued_messages: int
    queue: str
    async_commit: bool
    prepared_statements: bool
    db_pooler: str
    session_database_url: str
    dispatch_mode: str
    index_redis_url: str
    index_prefix: str
    index_lease_seconds: float
    max_payload_bytes: int
    max_result_bytes: int
    max_json_depth: int
    priority_aging_seconds: float
    degraded_backlog: int
    degraded_after_seconds: float

    def __post_init__(self) -> None:
        if not self.default_time_limit_seconds > 0:
            raise ValueError("TEMPO_DEFAULT_TIME_LIMIT_SECONDS must be a positive number")
        if not self.transaction_group_ms >= 0:
            raise ValueError("TEMPO_TUNING['TRANSACTION_GROUP_MS'] must be at least 0")
        if self.db_pooler not in DB_POOLERS:
            raise ValueError(
                f"TEMPO_DB_POOLER must be empty or transaction, not {self.db_pooler!r}"
            )
        if self.db_pooler and self.prepared_statements:
            raise ValueError(
                "TEMPO_TUNING['PREPARED_STATEMENTS'] needs a session connection: turn it "
                "off behind a transaction pooler"
            )
        if not 0 <= self.deferred_start_seconds <= self.claim_ttl_seconds / 2:
            raise ValueError(
                "TEMPO_TUNING['DEFERRED_START_SECONDS'] must be between 0 (off) and half "
                "of TEMPO_CLAIM_TTL_SECONDS: the start must be written while the claim holds"
            )
        if not self.worker_check_seconds >= 0:
            raise ValueError(
                "TEMPO_TUNING['WORKER_CHECK_SECONDS'] must be 0 (off) or a positive number"
            )
        if not self.notify_off_poll_seconds > 0:
            raise ValueError("TEMPO_NOTIFY_OFF_POLL_SECONDS must be a positive number")
        if self.dispatch_mode not in DISPATCH_MODES:
            raise ValueError(
                f"TEMPO_DISPATCH_MODE must be database or redis, not {self.dispatch_mode!r}"
            )

    def celery_queue(self, queue: str) -> str:
        """The Celery queue of a Tempo queue: `QUEUE` itself for the default queue,
        `QUEUE.<name>` for the others (workers subscribe with -Q)."""
        return self.queue if queue == DEFAULT_QUEUE else f"{self.queue}.{queue}"

    def tempo_queue(self, celery_queue: str) -> str | None:
        """The Tempo queue a Celery queue serves, or None if it is none of ours."""
        if celery_queue == self.queue:
            return DEFAULT_QUEUE
        prefix = f"{self.queue}."
        return celery_queue[len(prefix) :] if celery_queue.startswith(prefix) else None

    @classmethod
    def load(cls) -> TempoSettings:
        """Read `settings.TEMPO` (and `TEMPO_TUNING`) now, over the defaults, each value
        converted to its field's type."""
        raw = {**configured("TEMPO"), **configured("TEMPO_TUNING")}
        if raw["PREPARED_STATEMENTS"] is None:
            raw["PREPARED_STATEMENTS"] = not raw["DB_POOLER"]
        if not raw["INDEX_REDIS_URL"]:
            broker = str(getattr(django_settings, "CELERY_BROKER_URL", "") or "")
            raw["INDEX_REDIS_URL"] = broker if broker.startswith(REDIS_SCHEMES) else ""
        raw["INDEX_PREFIX"] = raw["INDEX_PREFIX"] or f"{raw['QUEUE']}:"
        # A deferred start is written while the claim holds: a shorter claim lifetime
        # shortens the deferral with it.
        half_claim = float(raw["CLAIM_TTL_SECONDS"]) / 2
        raw["DEFERRED_START_SECONDS"] = min(float(raw["DEFERRED_START_SECONDS"]), half_claim)
        return cls(**{f.name: _TYPES[f.type](raw[f.name.upper()]) for f in fields(cls)})

    def check_dispatch(self, *, listen_notify: bool, postgres: bool = True) -> None:
        """What a dispatcher asks of these settings on its database. With LISTEN/NOTIFY
        work scheduled after a poll is learnt from notifications, which announce work due
        within the notify window only: a poll must not look further. Polling only
        (`TEMPO_DISPATCH_NOTIFY=false` on PostgreSQL), every poll must look at least one
        poll interval ahead, or work due just past the horizon is read too late. Without
        notifications there is no Redis mode (the index is written from them)."""
        if listen_notify and self.lookahead_seconds > NOTIFY_WINDOW_SECONDS:
            raise ValueError(
                "TEMPO_LOOKAHEAD_SECONDS must not exceed the notify window "
                f"({NOTIFY_WINDOW_SECONDS} s)"
            )
        if postgres and not listen_notify and self.lookahead_seconds < self.notify_off_poll_seconds:
            raise ValueError(
                "TEMPO_LOOKAHEAD_SECONDS must be at least TEMPO_NOTIFY_OFF_POLL_SECONDS "
                "when dispatchers poll only"
            )
        if postgres and self.db_pooler and not self.session_database_url:
            raise ValueError(
                "TEMPO_DB_POOLER=transaction: a dispatcher needs TEMPO_SESSION_DATABASE_URL, "
                "a direct connection to PostgreSQL for its advisory locks and LISTEN"
            )
        if self.dispatch_mode == "redis" and not self.index_redis_url:
            raise ValueError(
                "TEMPO_DISPATCH_MODE=redis needs TEMPO_INDEX_REDIS_URL (or a Redis "
                "CELERY_BROKER_URL, its default)"
            )
        if not listen_notify and self.dispatch_mode == "redis":
            raise ValueError(
                "TEMPO_DISPATCH_MODE=redis needs PostgreSQL with TEMPO_DISPATCH_NOTIFY=true"
            )


@functools.cache
def tempo_settings() -> TempoSettings:
    """This process's settings, read on first use: for code on the worker's per-job path
    and the engine's database sessions, which have no long-lived object to hold them."""
    return TempoSettings.load()


def _read_again(*, setting: str, **kwargs) -> None:
    if setting in ("TEMPO", "TEMPO_TUNING"):  # override_settings, as tests do
        tempo_settings.cache_clear()


setting_changed.connect(_read_again, dispatch_uid="tempo-settings-changed")
