"""Delivery of a notice by one channel: email through Django's email backend, webhook as
a JSON POST. A channel that fails raises; the evaluator logs it and tries again later."""

from __future__ import annotations

import json
import urllib.request

from django.conf import settings
from django.core.mail import get_connection, send_mail

from tasksapp.alerts.models import AlertIncident

WEBHOOK_TIMEOUT = 5.0  # seconds; a slow endpoint costs one evaluation this much at most
EMAIL_TIMEOUT = 10.0  # seconds, when EMAIL_TIMEOUT is not set (Django's default: none)
SUBJECT = "[Tempo] {status}: {rule} ({key})"
BODY = "{status}: {summary}\n\nRule: {rule} ({kind})\nKey: {key}\nOpened: {opened_at}\n"
BODY_RESOLVED = "Resolved: {resolved_at}\n"
ERR_WEBHOOK_STATUS = "webhook answered HTTP {status}"


def notice(incident: AlertIncident, phase: str) -> dict:
    """What a notice says, as the webhook's JSON body."""
    rule = incident.rule
    return {
        "status": phase,
        "rule": rule.name,
        "rule_id": rule.pk,
        "kind": rule.kind,
        "key": incident.key,
        "summary": incident.summary,
        "incident_id": incident.pk,
        "opened_at": incident.opened_at.isoformat(),
        "resolved_at": incident.resolved_at.isoformat() if incident.resolved_at else None,
    }


def deliver(channel: str, incident: AlertIncident, phase: str) -> None:
    SENDERS[channel](incident, notice(incident, phase))


def send_email(incident: AlertIncident, body: dict) -> None:
    fields = {**body, "status": body["status"].upper()}
    text = BODY.format(**fields)
    if body["resolved_at"]:
        text += BODY_RESOLVED.format(**fields)
    timeout = getattr(settings, "EMAIL_TIMEOUT", None) or EMAIL_TIMEOUT
    send_mail(
        SUBJECT.format(**fields),
        text,
        settings.DEFAULT_FROM_EMAIL,
        incident.rule.email_list,
        connection=get_connection(fail_silently=False, timeout=timeout),
    )


def send_webhook(incident: AlertIncident, body: dict) -> None:
    request = urllib.request.Request(
        incident.rule.webhook_url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "tempo-alerts"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT) as response:  # noqa: S310
        if not 200 <= response.status < 300:
            raise OSError(ERR_WEBHOOK_STATUS.format(status=response.status))


SENDERS = {"email": send_email, "webhook": send_webhook}
