"""The evaluator: one incident and one "firing" notice per rule and key, nothing repeated
while it stays open, one "resolved" notice when it clears; a channel that failed is tried
again at the next evaluation. Email goes through a local SMTP sink, webhooks to a local
HTTP server."""

import datetime as dt

import pytest
from django.core import mail
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from tasksapp.alerts.models import AlertIncident, AlertKind
from tasksapp.alerts.services import alert_rule_create, alerts_evaluate
from tasksapp.alerts.tasks import ALERTS_EVALUATE, alerts_evaluate_task
from tasksapp.engine.models import Dispatcher, JobState
from tasksapp.engine.worker.celery_app import tempo_app
from tests.alerts.sinks import SmtpSink, WebhookReceiver, running
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)


def later(seconds: float) -> dt.datetime:
    return NOW + dt.timedelta(seconds=seconds)


@pytest.fixture
def smtp(settings):
    sink = running(SmtpSink())
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", sink.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.DEFAULT_FROM_EMAIL = "tempo@example.com"
    yield sink
    sink.shutdown()
    sink.server_close()


@pytest.fixture
def webhook():
    receiver = running(WebhookReceiver())
    yield receiver
    receiver.shutdown()
    receiver.server_close()


def dead_jobs_rule(**channels):
    return alert_rule_create(
        name="dead jobs",
        kind=AlertKind.DEAD_JOBS,
        threshold=1,
        window=dt.timedelta(minutes=10),
        **(channels or {"emails": "ops@example.com"}),
    )


def test_two_evaluations_one_firing_notice_then_one_resolved(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    dead_jobs_rule()
    JobFactory(handler="app.mail", state=JobState.DEAD, run_at=NOW, finished_at=NOW)

    first = alerts_evaluate(now=later(1))
    second = alerts_evaluate(now=later(61))
    assert (first.opened, first.sent, second.opened, second.sent) == (1, 1, 0, 0)
    assert [m.subject for m in mail.outbox] == ["[Tempo] FIRING: dead jobs (app.mail)"]
    assert mail.outbox[0].to == ["ops@example.com"]
    assert "1 job(s) of app.mail went dead" in mail.outbox[0].body

    cleared = alerts_evaluate(now=later(601))  # the dead job has left the window
    quiet = alerts_evaluate(now=later(661))
    assert (cleared.resolved, cleared.sent, quiet.sent) == (1, 1, 0)
    assert mail.outbox[1].subject == "[Tempo] RESOLVED: dead jobs (app.mail)"
    assert len(mail.outbox) == 2
    incident = AlertIncident.objects.get()
    assert (incident.resolved_at, incident.pending) == (later(601), False)


def test_end_to_end_by_smtp_and_webhook(smtp, webhook):
    alert_rule_create(
        name="dispatchers",
        kind=AlertKind.DISPATCHER_GONE,
        threshold=30,
        emails="ops@example.com, oncall@example.com",
        webhook_url=webhook.url,
    )
    gone = Dispatcher.objects.create(name="d1", hostname="h", pid=7, heartbeat_at=NOW)

    assert alerts_evaluate(now=later(10)).opened == 0
    assert alerts_evaluate(now=later(40)).sent == 2
    alerts_evaluate(now=later(100))  # still gone: nothing again
    assert len(smtp.messages) == 1 and len(webhook.received) == 1
    sender, recipients, message = smtp.messages[0]
    assert (sender, recipients) == ("tempo@example.com", ["ops@example.com", "oncall@example.com"])
    assert message["Subject"] == "[Tempo] FIRING: dispatchers (d1)"
    assert "dispatcher d1: no heartbeat for 40 s and not stopped" in message.get_content()
    content_type, body = webhook.received[0]
    assert content_type == "application/json"
    incident = AlertIncident.objects.get()
    assert body == {
        "status": "firing",
        "rule": "dispatchers",
        "rule_id": incident.rule_id,
        "kind": "dispatcher_gone",
        "key": "d1",
        "summary": "dispatcher d1: no heartbeat for 40 s and not stopped",
        "incident_id": incident.id,
        "opened_at": later(40).isoformat(),
        "resolved_at": None,
    }

    gone.stopped_at = later(120)
    gone.save()
    assert alerts_evaluate(now=later(130)).resolved == 1
    alerts_evaluate(now=later(190))
    assert [m["Subject"] for _, _, m in smtp.messages] == [
        "[Tempo] FIRING: dispatchers (d1)",
        "[Tempo] RESOLVED: dispatchers (d1)",
    ]
    assert [b["status"] for _, b in webhook.received] == ["firing", "resolved"]
    assert webhook.received[1][1]["resolved_at"] == later(130).isoformat()


def test_a_failed_webhook_is_tried_again_and_the_email_not_repeated(settings, webhook):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    webhook.statuses = [500]
    dead_jobs_rule(emails="ops@example.com", webhook_url=webhook.url)
    JobFactory(handler="app.mail", state=JobState.DEAD, run_at=NOW, finished_at=NOW)

    first = alerts_evaluate(now=later(1))
    assert (first.sent, first.failed, len(mail.outbox), webhook.received) == (1, 1, 1, [])
    assert AlertIncident.objects.get().pending
    second = alerts_evaluate(now=later(61))
    assert (second.sent, second.failed, len(mail.outbox)) == (1, 0, 1)
    assert [b["status"] for _, b in webhook.received] == ["firing"]
    assert not AlertIncident.objects.get().pending


def test_an_unreachable_webhook_fails_fast_and_nothing_is_resolved_unheard():
    dead_jobs_rule(webhook_url="http://127.0.0.1:9/nothing-listens")
    JobFactory(handler="app.mail", state=JobState.DEAD, run_at=NOW, finished_at=NOW)
    assert alerts_evaluate(now=later(1)).failed == 1
    cleared = alerts_evaluate(now=later(601))
    assert (cleared.resolved, cleared.sent, cleared.failed) == (1, 0, 0)
    assert not AlertIncident.objects.get().pending


def test_a_condition_back_after_resolution_opens_a_new_incident(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    dead_jobs_rule()
    JobFactory(handler="app.mail", state=JobState.DEAD, run_at=NOW, finished_at=NOW)
    alerts_evaluate(now=later(1))
    alerts_evaluate(now=later(601))
    JobFactory(handler="app.mail", state=JobState.DEAD, run_at=later(650), finished_at=later(650))
    assert alerts_evaluate(now=later(660)).opened == 1
    assert [m.subject.split(":")[0] for m in mail.outbox] == [
        "[Tempo] FIRING",
        "[Tempo] RESOLVED",
        "[Tempo] FIRING",
    ]
    assert AlertIncident.objects.filter(resolved_at=None).count() == 1


def test_an_inactive_rule_is_not_evaluated(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    dead_jobs_rule().__class__.objects.update(active=False)
    JobFactory(handler="app.mail", state=JobState.DEAD, run_at=NOW, finished_at=NOW)
    result = alerts_evaluate(now=later(1))
    assert (result.rules, result.opened, mail.outbox) == (0, 0, [])


def test_beat_runs_the_evaluator_every_minute():
    entry = PeriodicTask.objects.get(task=ALERTS_EVALUATE)
    assert (entry.interval.every, entry.interval.period, entry.enabled) == (1, "minutes", True)
    assert ALERTS_EVALUATE in tempo_app().tasks
    assert alerts_evaluate_task() == {
        "rules": 0,
        "opened": 0,
        "resolved": 0,
        "sent": 0,
        "failed": 0,
        "pruned": 0,
    }


def test_an_smtp_server_down_is_tried_again_at_the_next_evaluation(smtp, settings):
    dead_jobs_rule()
    JobFactory(handler="app.mail", state=JobState.DEAD, run_at=NOW, finished_at=NOW)
    settings.EMAIL_PORT = 9  # nothing listens: the connection is refused
    first = alerts_evaluate(now=later(1))
    assert (first.sent, first.failed, smtp.messages) == (0, 1, [])
    settings.EMAIL_PORT = smtp.port
    second = alerts_evaluate(now=later(61))
    third = alerts_evaluate(now=later(121))
    assert (second.sent, third.sent, len(smtp.messages)) == (1, 0, 1)
    assert smtp.messages[0][2]["Subject"] == "[Tempo] FIRING: dead jobs (app.mail)"


def test_resolved_incidents_are_removed_after_ninety_days(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    dead_jobs_rule()
    JobFactory(handler="app.mail", state=JobState.DEAD, run_at=NOW, finished_at=NOW)
    alerts_evaluate(now=later(1))
    alerts_evaluate(now=later(601))  # resolved at +601 s
    ninety_days = 90 * 86400
    assert alerts_evaluate(now=later(601 + ninety_days)).pruned == 0
    assert alerts_evaluate(now=later(602 + ninety_days)).pruned == 1
    assert not AlertIncident.objects.exists()
