"""Alert rules' validation: a refused rule says why and stores nothing."""

import datetime as dt

import pytest

from tasksapp.alerts.models import AlertKind, AlertRule
from tasksapp.alerts.services import (
    ERR_EMAIL,
    ERR_KIND,
    ERR_NAME,
    ERR_NAME_TAKEN,
    ERR_NO_CHANNEL,
    ERR_NOT_FOUND,
    ERR_SCOPE_HANDLER,
    ERR_SCOPE_QUEUE,
    ERR_THRESHOLD,
    ERR_WEBHOOK_URL,
    ERR_WINDOW,
    AlertInputError,
    alert_rule_create,
    alert_rule_update,
)

pytestmark = pytest.mark.django_db

GOOD = {
    "name": "dead mail",
    "kind": AlertKind.DEAD_JOBS,
    "threshold": 3,
    "emails": "ops@example.com",
}


def test_a_rule_is_created_with_its_channels_cleaned():
    rule = alert_rule_create(
        **{**GOOD, "emails": " ops@example.com,\n oncall@example.com "},
        webhook_url="https://hooks.example.com/t",
        handler="app.mail.send",
    )
    rule.refresh_from_db()
    assert rule.email_list == ["ops@example.com", "oncall@example.com"]
    assert rule.channels() == ["email", "webhook"]
    assert (rule.threshold, rule.window) == (3.0, dt.timedelta(minutes=15))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "  "}, ERR_NAME),
        ({"kind": "cpu"}, ERR_KIND.format(kind="cpu", kinds=", ".join(AlertKind.values))),
        ({"threshold": 0}, ERR_THRESHOLD.format(least=1, kind="dead_jobs")),
        ({"threshold": "many"}, ERR_THRESHOLD.format(least=1, kind="dead_jobs")),
        ({"threshold": float("nan")}, ERR_THRESHOLD.format(least=1, kind="dead_jobs")),
        (
            {"kind": AlertKind.OLDEST_DUE, "threshold": -1},
            ERR_THRESHOLD.format(least=0, kind="oldest_due"),
        ),
        ({"window": dt.timedelta(seconds=10)}, ERR_WINDOW),
        ({"window": dt.timedelta(days=8)}, ERR_WINDOW),
        ({"kind": AlertKind.OLDEST_DUE, "threshold": 60, "handler": "a.b"}, ERR_SCOPE_HANDLER),
        ({"queue": "mail"}, ERR_SCOPE_QUEUE),
        ({"kind": AlertKind.DISPATCHER_GONE, "threshold": 60, "queue": "q"}, ERR_SCOPE_QUEUE),
        ({"emails": ""}, ERR_NO_CHANNEL),
        ({"emails": "ops@example.com, nobody"}, ERR_EMAIL.format(address="nobody")),
        (
            {"emails": "", "webhook_url": "file:///etc/passwd"},
            ERR_WEBHOOK_URL.format(url="file:///etc/passwd"),
        ),
        (
            {"emails": "", "webhook_url": "ftp://example.com/x"},
            ERR_WEBHOOK_URL.format(url="ftp://example.com/x"),
        ),
        ({"emails": "", "webhook_url": "https://"}, ERR_WEBHOOK_URL.format(url="https://")),
    ],
)
def test_a_bad_rule_is_refused_with_its_reason_and_nothing_stored(changes, message):
    with pytest.raises(AlertInputError) as refused:
        alert_rule_create(**{**GOOD, **changes})
    assert str(refused.value) == message
    assert not AlertRule.objects.exists()


def test_names_are_unique():
    alert_rule_create(**GOOD)
    with pytest.raises(AlertInputError) as refused:
        alert_rule_create(**GOOD)
    assert str(refused.value) == ERR_NAME_TAKEN.format(name="dead mail")
    assert AlertRule.objects.count() == 1


def test_an_update_is_validated_as_a_whole_and_a_refusal_changes_nothing():
    rule = alert_rule_create(**GOOD)
    with pytest.raises(AlertInputError) as refused:
        alert_rule_update(rule_id=rule.id, emails="")
    assert str(refused.value) == ERR_NO_CHANNEL
    rule.refresh_from_db()
    assert rule.emails == "ops@example.com"
    alert_rule_update(rule_id=rule.id, threshold=5, webhook_url="http://127.0.0.1:9/x")
    rule.refresh_from_db()
    assert (rule.threshold, rule.webhook_url) == (5.0, "http://127.0.0.1:9/x")
    with pytest.raises(AlertInputError) as refused:
        alert_rule_update(rule_id=rule.id + 1, threshold=2)
    assert str(refused.value) == ERR_NOT_FOUND.format(rule_id=rule.id + 1)
