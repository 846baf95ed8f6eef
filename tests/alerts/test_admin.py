"""Alert rules in the admin: added and edited through the services, each change in the
audit log; a refused rule shows its reason and stores nothing."""

import pytest
from django.urls import reverse

from tasksapp.alerts.models import AlertRule
from tasksapp.alerts.services import ERR_WEBHOOK_URL
from tasksapp.web.models import OperatorAction

pytestmark = pytest.mark.django_db

FORM = {
    "name": "no worker",
    "kind": "no_worker",
    "threshold": "60",
    "window": "00:15:00",
    "handler": "",
    "queue": "mail",
    "emails": "ops@example.com",
    "webhook_url": "",
    "active": "on",
}


@pytest.fixture
def client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "x"))
    return client


def test_a_rule_added_and_edited_in_the_admin_is_audited(client):
    response = client.post(reverse("admin:tasksapp_alertrule_add"), FORM)
    assert response.status_code == 302
    rule = AlertRule.objects.get()
    assert (rule.kind, rule.threshold, rule.queue) == ("no_worker", 60.0, "mail")
    change = reverse("admin:tasksapp_alertrule_change", args=[rule.pk])
    assert client.post(change, {**FORM, "threshold": "120"}).status_code == 302
    rule.refresh_from_db()
    assert rule.threshold == 120.0
    actions = OperatorAction.objects.order_by("id")
    assert [(a.action, a.target_type, a.target_id, a.via) for a in actions] == [
        ("alert_rule_create", "alert_rule", str(rule.pk), "admin"),
        ("alert_rule_edit", "alert_rule", str(rule.pk), "admin"),
    ]
    assert actions[1].details == {"name": "no worker", "changed": ["threshold"]}


def test_a_refused_rule_shows_why_and_stores_nothing(client):
    url = "gopher://example.com/"
    response = client.post(reverse("admin:tasksapp_alertrule_add"), {**FORM, "webhook_url": url})
    assert response.status_code == 200
    assert ERR_WEBHOOK_URL.format(url=url) in response.content.decode().replace("&#x27;", "'")
    assert not AlertRule.objects.exists() and not OperatorAction.objects.exists()


def test_incidents_are_read_only(client):
    assert client.get(reverse("admin:tasksapp_alertincident_changelist")).status_code == 200
    assert client.get(reverse("admin:tasksapp_alertincident_add")).status_code == 403


def test_the_roles_see_rules_and_incidents_and_change_nothing(django_user_model):
    from django.contrib.auth.models import Group

    from tasksapp.web.operators import roles_ensure

    roles_ensure()
    for role in ("viewer", "operator"):
        user = django_user_model.objects.create_user(role)
        user.groups.add(Group.objects.get(name=role))
        assert user.has_perm("tasksapp.view_alertrule")
        assert user.has_perm("tasksapp.view_alertincident")
        assert not user.has_perm("tasksapp.change_alertrule")
        assert not user.has_perm("tasksapp.add_alertrule")
