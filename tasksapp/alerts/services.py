"""Alert rules' writes (validated: a refusal is an AlertInputError with one of the ERR_
messages and changes nothing) and the evaluator beat runs every minute."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import DatabaseError
from django.utils import timezone

from tasksapp.alerts import conditions, notify
from tasksapp.alerts.models import AlertIncident, AlertKind, AlertRule
from tasksapp.engine.db import tempo_atomic

logger = logging.getLogger(__name__)

ERR_NAME = "An alert rule needs a name of at most 100 characters."
ERR_NAME_TAKEN = "An alert rule named {name!r} exists already."
ERR_KIND = "Unknown alert kind {kind!r}: choose one of {kinds}."
ERR_THRESHOLD = "The threshold must be a number of at least {least:g} for {kind}."
ERR_WINDOW = "The window must be between one minute and seven days."
ERR_SCOPE_HANDLER = "A handler scope applies to dead jobs and start lag only."
ERR_SCOPE_QUEUE = "A queue scope applies to oldest due, start lag and no worker only."
ERR_NO_CHANNEL = "An alert rule needs an email address or a webhook URL."
ERR_EMAIL = "Not an email address: {address!r}."
ERR_WEBHOOK_URL = "The webhook URL must be an http:// or https:// URL with a host: {url!r}."
ERR_NOT_FOUND = "No alert rule {rule_id}."

EDITABLE = (
    "name",
    "kind",
    "threshold",
    "window",
    "handler",
    "queue",
    "emails",
    "webhook_url",
    "active",
)
LEAST_THRESHOLD = {AlertKind.DEAD_JOBS: 1.0}  # the others are seconds: 0 and up
HANDLER_SCOPED = {AlertKind.DEAD_JOBS, AlertKind.START_LAG}
QUEUE_SCOPED = {AlertKind.OLDEST_DUE, AlertKind.START_LAG, AlertKind.NO_WORKER}
WINDOW_RANGE = (dt.timedelta(minutes=1), dt.timedelta(days=7))
FIRING, RESOLVED = "firing", "resolved"
INCIDENT_AGE = dt.timedelta(days=90)  # resolved incidents are kept this long


class AlertInputError(ValueError):
    """An alert rule refused; the message says why."""


@dataclass
class EvaluationResult:
    rules: int = 0
    opened: int = 0
    resolved: int = 0
    sent: int = 0
    failed: int = 0
    pruned: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def alert_rule_create(
    *,
    name: str,
    kind: str,
    threshold: float,
    emails: str = "",
    webhook_url: str = "",
    window: dt.timedelta = dt.timedelta(minutes=15),
    handler: str = "",
    queue: str = "",
    active: bool = True,
) -> AlertRule:
    values = validated_rule(
        {
            "name": name,
            "kind": kind,
            "threshold": threshold,
            "window": window,
            "handler": handler,
            "queue": queue,
            "emails": emails,
            "webhook_url": webhook_url,
            "active": active,
        }
    )
    if AlertRule.objects.filter(name=values["name"]).exists():
        raise AlertInputError(ERR_NAME_TAKEN.format(name=values["name"]))
    return AlertRule.objects.create(**values)


def alert_rule_update(*, rule_id: int, **changes: Any) -> AlertRule:
    """Changes some fields (EDITABLE); the whole rule is validated as it would be."""
    with tempo_atomic():
        rule = AlertRule.objects.select_for_update().filter(id=rule_id).first()
        if rule is None:
            raise AlertInputError(ERR_NOT_FOUND.format(rule_id=rule_id))
        unknown = set(changes) - set(EDITABLE)
        if unknown:
            raise TypeError(f"not editable: {sorted(unknown)}")
        values = validated_rule({**{f: getattr(rule, f) for f in EDITABLE}, **changes})
        if AlertRule.objects.filter(name=values["name"]).exclude(id=rule_id).exists():
            raise AlertInputError(ERR_NAME_TAKEN.format(name=values["name"]))
        for field, value in values.items():
            setattr(rule, field, value)
        rule.save()
    return rule


def validated_rule(values: dict[str, Any]) -> dict[str, Any]:
    """The values cleaned, or AlertInputError with the first thing wrong."""
    name = str(values.get("name") or "").strip()
    if not name or len(name) > 100:
        raise AlertInputError(ERR_NAME)
    kind = values.get("kind")
    if kind not in AlertKind.values:
        raise AlertInputError(ERR_KIND.format(kind=kind, kinds=", ".join(AlertKind.values)))
    threshold = _threshold(values.get("threshold"), kind)
    window = values.get("window")
    if not isinstance(window, dt.timedelta) or not WINDOW_RANGE[0] <= window <= WINDOW_RANGE[1]:
        raise AlertInputError(ERR_WINDOW)
    handler = str(values.get("handler") or "").strip()
    queue = str(values.get("queue") or "").strip()
    if handler and kind not in HANDLER_SCOPED:
        raise AlertInputError(ERR_SCOPE_HANDLER)
    if queue and kind not in QUEUE_SCOPED:
        raise AlertInputError(ERR_SCOPE_QUEUE)
    emails = _emails(str(values.get("emails") or ""))
    webhook_url = _webhook_url(str(values.get("webhook_url") or "").strip())
    if not emails and not webhook_url:
        raise AlertInputError(ERR_NO_CHANNEL)
    return {
        "name": name,
        "kind": kind,
        "threshold": threshold,
        "window": window,
        "handler": handler,
        "queue": queue,
        "emails": ", ".join(emails),
        "webhook_url": webhook_url,
        "active": bool(values.get("active", True)),
    }


def _threshold(value: Any, kind: str) -> float:
    least = LEAST_THRESHOLD.get(kind, 0.0)
    error = AlertInputError(ERR_THRESHOLD.format(least=least, kind=kind))
    if isinstance(value, bool):
        raise error
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise error from None
    if not number >= least or number == float("inf"):  # NaN fails too
        raise error
    return number


def _emails(text: str) -> list[str]:
    addresses = [a.strip() for a in text.replace("\n", ",").split(",") if a.strip()]
    for address in addresses:
        try:
            validate_email(address)
        except ValidationError:
            raise AlertInputError(ERR_EMAIL.format(address=address)) from None
    return addresses


def _webhook_url(url: str) -> str:
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 500:
        raise AlertInputError(ERR_WEBHOOK_URL.format(url=url))
    return url


def alerts_evaluate(*, now: dt.datetime | None = None) -> EvaluationResult:
    """One evaluation: per active rule, open an incident for each key whose condition
    holds and has none open, resolve the open ones whose condition cleared; then send the
    notices not delivered yet (each channel once per incident and phase)."""
    now = now or timezone.now()
    result = EvaluationResult()
    for rule in AlertRule.objects.filter(active=True).order_by("id"):
        result.rules += 1
        try:
            opened, resolved = _rule_evaluate(rule, now)
        except DatabaseError:
            logger.exception("alert rule %s: not evaluated, tried again next time", rule)
            continue
        result.opened += opened
        result.resolved += resolved
    _notices_send(result)
    result.pruned = alert_incidents_prune(now=now)
    return result


def alert_incidents_prune(*, now: dt.datetime) -> int:
    """Removes the incidents resolved, with nothing owed, more than INCIDENT_AGE ago."""
    old = AlertIncident.objects.filter(resolved_at__lt=now - INCIDENT_AGE, pending=False)
    return old.delete()[0]


def _rule_evaluate(rule: AlertRule, now: dt.datetime) -> tuple[int, int]:
    with tempo_atomic():
        AlertRule.objects.select_for_update().filter(id=rule.id).first()  # one evaluator a rule
        firing = conditions.firing_keys(rule, now)
        open_ = {i.key: i for i in AlertIncident.objects.filter(rule=rule, resolved_at=None)}
        for key, incident in open_.items():
            if key in firing and incident.summary != firing[key]:
                incident.summary = firing[key]  # the latest figures; no new notice
                incident.save(update_fields=["summary"])
        gone = [key for key in open_ if key not in firing]
        AlertIncident.objects.filter(rule=rule, resolved_at=None, key__in=gone).update(
            resolved_at=now, pending=True
        )
        new = [
            AlertIncident(rule=rule, key=key[:200], summary=summary, opened_at=now)
            for key, summary in firing.items()
            if key not in open_
        ]
        AlertIncident.objects.bulk_create(new)
    return len(new), len(gone)


def _notices_send(result: EvaluationResult) -> None:
    """Each incident of an active rule with a notice some channel has not taken."""
    pending = AlertIncident.objects.filter(pending=True, rule__active=True)
    for incident_id in pending.values_list("id", flat=True).order_by("id"):
        with tempo_atomic():
            incident = (
                AlertIncident.objects.select_for_update(skip_locked=True)
                .select_related("rule")
                .filter(id=incident_id)
                .first()
            )
            if incident is not None:
                _incident_notify(incident, result)


def _incident_notify(incident: AlertIncident, result: EvaluationResult) -> None:
    phase = RESOLVED if incident.resolved_at else FIRING
    done = dict(incident.deliveries.get(phase, {}))
    owed = [c for c in incident.rule.channels() if c not in done]
    if phase == RESOLVED and not incident.deliveries.get(FIRING):
        owed = []  # resolved before anyone heard of it: nothing to take back
    for channel in owed:
        try:
            notify.deliver(channel, incident, phase)
        except Exception:
            result.failed += 1
            logger.exception("alert %s: the %s notice by %s failed", incident, phase, channel)
            continue
        result.sent += 1
        done[channel] = timezone.now().isoformat()
        incident.last_notified_at = timezone.now()
    incident.deliveries = {**incident.deliveries, phase: done}
    incident.pending = any(c not in done for c in owed)
    incident.save(update_fields=["deliveries", "last_notified_at", "pending"])
