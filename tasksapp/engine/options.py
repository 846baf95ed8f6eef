"""The options every creator of jobs accepts, checked in one place.

job_schedule, the recurring and graph services, the API's serializers and the admin form
all validate through here, so a value is refused with the same message wherever it
comes in. Each check raises JobOptionsError naming the field; callers turn it into their
own error type (or form/field error) with the message unchanged.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from tasksapp.engine.ages import RetentionAgesError, retention_ages
from tasksapp.engine.handlers import HandlerError, resolve_handler
from tasksapp.engine.jsonvalues import JsonValueError, checked_json, checked_text
from tasksapp.engine.models import Delivery
from tasksapp.engine.retry import RetryPolicyError, validate_policy
from tasksapp.engine.settings import DEFAULT_QUEUE, tempo_settings

ERR_PAYLOAD_JSON = "payload must be JSON-serialisable: {reason}"
ERR_MAX_ATTEMPTS = "max_attempts must be an integer between 1 and 1000."
ERR_DELIVERY = "delivery must be one of: {choices}."
ERR_TIME_LIMIT = "time_limit must be a positive number of seconds, at most 86400 (one day)."
ERR_KEY = "idempotency_key must be a non-empty string of at most 200 characters."
ERR_QUEUE = (
    "queue must be 1-64 characters: lower-case letters, digits, '_' and '-', starting with"
    " a letter or digit."
)
ERR_PRIORITY = "priority must be an integer from 0 (lowest) to 9 (highest), or one of: {names}."
ERR_CONCURRENCY_KEY = "concurrency_key must be a string of at most 200 characters."

MAX_ATTEMPTS = 1000
MAX_KEY_LENGTH = 200
# A job that may run for more than a day holds its worker slot, its lease and a retry's
# worth of the period that long: split such work into jobs. Kept in step with the message.
MAX_TIME_LIMIT = 86_400.0
QUEUE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# Priorities: 0 lowest, 9 highest; named levels are stored as their numbers.
MIN_PRIORITY, MAX_PRIORITY = 0, 9
PRIORITY_LEVELS = {"low": 2, "normal": 5, "high": 7, "critical": 9}
DEFAULT_PRIORITY = PRIORITY_LEVELS["normal"]


class JobOptionsError(ValueError):
    """A job option is invalid: ``field`` names it, the message says what to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def validated_handler(handler: Any) -> str:
    """The handler's dotted path, once it imports as a callable."""
    try:
        resolve_handler(handler)
    except HandlerError as exc:
        raise JobOptionsError("handler", str(exc)) from exc
    return handler


def validated_payload(payload: Any) -> Any:
    """The payload as the jobs table stores it; None becomes {}. Refused (see
    tasksapp.engine.jsonvalues): what is not JSON or does not read back the same from
    PostgreSQL and SQLite (NaN, lone surrogates, NUL, numbers beyond 2**53, non-string
    keys), payloads over TEMPO_MAX_PAYLOAD_BYTES or nested over TEMPO_MAX_JSON_DEPTH."""
    if payload is None:
        return {}
    limits = tempo_settings()
    try:
        return checked_json(
            payload,
            what="payload",
            max_bytes=limits.max_payload_bytes,
            max_depth=limits.max_json_depth,
            limit_name="TEMPO_MAX_PAYLOAD_BYTES",
        )
    except JsonValueError as exc:
        raise JobOptionsError("payload", str(exc)) from exc


def _storable_text(field: str, text: str) -> str:
    """`text` unless a text column cannot hold it (NUL, a lone surrogate)."""
    try:
        return checked_text(text, what=field)
    except JsonValueError as exc:
        raise JobOptionsError(field, str(exc)) from exc


def validated_idempotency_key(key: Any) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        raise JobOptionsError("idempotency_key", ERR_KEY)
    return _storable_text("idempotency_key", key)


def validated_retry_policy(policy: Any) -> dict[str, Any]:
    """The normalised policy (None or {}: the default one)."""
    try:
        return validate_policy(policy)
    except RetryPolicyError as exc:
        raise JobOptionsError("retry_policy", str(exc)) from exc


def validated_retention(retention: Any) -> dict[str, float]:
    """How long finished jobs are kept, in days per finished state (a recurring task's or
    a handler's own ages); None or {} keeps the defaults."""
    try:
        return retention_ages(retention)
    except RetentionAgesError as exc:
        raise JobOptionsError("retention", str(exc)) from exc


def _validated_max_attempts(max_attempts: Any) -> int:
    whole = isinstance(max_attempts, int) and not isinstance(max_attempts, bool)
    if not whole or not 1 <= max_attempts <= MAX_ATTEMPTS:
        raise JobOptionsError("max_attempts", ERR_MAX_ATTEMPTS)
    return max_attempts


def _validated_delivery(delivery: Any) -> str:
    if delivery not in Delivery.values:
        choices = ", ".join(Delivery.values)
        raise JobOptionsError("delivery", ERR_DELIVERY.format(choices=choices))
    return delivery


def _validated_time_limit(time_limit: Any) -> float | None:
    if time_limit is None:
        return None
    if not _is_number(time_limit) or not 0 < time_limit <= MAX_TIME_LIMIT:
        raise JobOptionsError("time_limit", ERR_TIME_LIMIT)
    return time_limit


def validated_queue(queue: Any) -> str:
    """A queue name: it also names the Celery queue (no dots, so `<prefix>.<queue>` reads
    back) and travels in NOTIFY payloads (no colons)."""
    if not isinstance(queue, str) or not QUEUE_NAME.fullmatch(queue):
        raise JobOptionsError("queue", ERR_QUEUE)
    return queue


def validated_priority(priority: Any) -> int:
    """0-9, or a named level (low 2, normal 5, high 7, critical 9)."""
    if isinstance(priority, str) and priority in PRIORITY_LEVELS:
        return PRIORITY_LEVELS[priority]
    whole = isinstance(priority, int) and not isinstance(priority, bool)
    if not whole or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        names = ", ".join(PRIORITY_LEVELS)
        raise JobOptionsError("priority", ERR_PRIORITY.format(names=names))
    return priority


def _validated_concurrency_key(key: Any) -> str:
    if key is None:
        return ""
    if not isinstance(key, str) or len(key) > MAX_KEY_LENGTH:
        raise JobOptionsError("concurrency_key", ERR_CONCURRENCY_KEY)
    return _storable_text("concurrency_key", key)


@dataclass(frozen=True)
class JobOptions:
    """How a job runs: attempts, delays between them, delivery mode, time limit, and where
    it is routed: its queue, its priority and the key its queue's per-key concurrency
    limit counts ("" for none). Build it with ``validated``; ``retry_policy`` is then
    normalised."""

    max_attempts: int
    retry_policy: dict[str, Any]
    delivery: str
    time_limit: float | None
    queue: str = DEFAULT_QUEUE
    priority: int = DEFAULT_PRIORITY
    concurrency_key: str = ""

    @classmethod
    def validated(
        cls,
        *,
        max_attempts: Any = 5,
        retry_policy: Any = None,
        delivery: Any = Delivery.TRANSACTIONAL,
        time_limit: Any = None,
        queue: Any = DEFAULT_QUEUE,
        priority: Any = DEFAULT_PRIORITY,
        concurrency_key: Any = "",
    ) -> JobOptions:
        """The options, or JobOptionsError for the first invalid one (the retry policy is
        checked first, as the services always have)."""
        policy = validated_retry_policy(retry_policy)
        return cls(
            max_attempts=_validated_max_attempts(max_attempts),
            retry_policy=policy,
            delivery=_validated_delivery(delivery),
            time_limit=_validated_time_limit(time_limit),
            queue=validated_queue(queue),
            priority=validated_priority(priority),
            concurrency_key=_validated_concurrency_key(concurrency_key),
        )

    def as_fields(self) -> dict[str, Any]:
        """The options as model fields (a Job's, a RecurringTask's), the policy copied."""
        return asdict(self)


# The option fields, in order, as Job, RecurringTask and their forms name them.
JOB_OPTION_FIELDS = tuple(option.name for option in fields(JobOptions))
