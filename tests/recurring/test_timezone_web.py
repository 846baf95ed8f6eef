"""A recurring task's time zone through the REST API and the admin, and on the
dashboard's recurring pages beside the period."""

import datetime as dt

import pytest
from django.urls import reverse

from tasksapp.recurring import localtime
from tasksapp.recurring.models import RecurringTask
from tasksapp.recurring.services import recurring_task_create
from tasksapp.recurring.services import recurring_tasks as task_svc
from tests.web.dashboard.fixtures import *  # noqa: F403  (operator_api and its fixtures)

HANDLER = "tests.handlers.recording.record"
DAY = dt.timedelta(days=1)
BERLIN = "Europe/Berlin"

pytestmark = pytest.mark.django_db


def berlin_task(**fields) -> RecurringTask:
    epoch = dt.datetime(2026, 3, 28, 12, tzinfo=dt.UTC)  # period 1: the 23-hour 29 March
    defaults = dict(name="local", handler=HANDLER, period=DAY, slices=24, timezone=BERLIN)
    return recurring_task_create(epoch=epoch, **{**defaults, **fields})


def test_api_creates_a_zoned_task_and_refuses_a_bad_zone(operator_api):
    body = {"name": "sync", "handler": HANDLER, "period_seconds": 86400, "slices": 24}
    bad = operator_api.post(
        "/api/recurring-tasks/", {**body, "timezone": "Europe/Atlantis"}, format="json"
    )
    assert bad.status_code == 400
    assert task_svc.ERR_TIMEZONE.format(value="Europe/Atlantis") in str(bad.json())
    hours = operator_api.post(
        "/api/recurring-tasks/",
        {**body, "timezone": BERLIN, "period_seconds": 7200},
        format="json",
    )
    assert hours.status_code == 400
    assert "its period must be whole days" in str(hours.json())
    assert not RecurringTask.objects.exists()

    made = operator_api.post("/api/recurring-tasks/", {**body, "timezone": BERLIN}, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["timezone"] == BERLIN
    task = RecurringTask.objects.get(name="sync")
    assert task.timezone == BERLIN
    assert task.epoch.astimezone(localtime.zone(BERLIN)).time() == dt.time(0)
    plain = operator_api.post(
        "/api/recurring-tasks/", {**body, "name": "plain", "period_seconds": 5400}, format="json"
    )
    assert plain.status_code == 201 and plain.json()["timezone"] == "UTC"


def task_form(**overrides) -> dict:
    data = {
        "name": "nightly",
        "handler": HANDLER,
        "payload": "{}",
        "max_attempts": "5",
        "retry_policy": "{}",
        "delivery": "transactional",
        "time_limit": "",
        "epoch_0": "2026-03-28",
        "epoch_1": "12:00:00",
        "period": "1 00:00:00",
        "slices": "24",
        "active": "on",
        "audience": "",
        "audience_filter": "{}",
        "phase_strategy": "golden",
        "timezone": BERLIN,
    }
    data.update(overrides)
    return data


def test_admin_creates_a_zoned_task_and_refuses_hours_with_a_zone(admin_client):
    url = reverse("admin:tasksapp_recurringtask_add")
    refused = admin_client.post(url, task_form(period="0 06:00:00"))
    assert refused.status_code == 200
    assert "its period must be whole days (got 6:00:00)" in refused.content.decode()
    assert not RecurringTask.objects.exists()

    assert admin_client.post(url, task_form()).status_code == 302
    task = RecurringTask.objects.get(name="nightly")
    assert task.timezone == BERLIN
    assert task.epoch == dt.datetime(2026, 3, 27, 23, tzinfo=dt.UTC)  # 28 March 00:00 CET
    page = admin_client.get(reverse("admin:tasksapp_recurringtask_change", args=[task.pk]))
    html = page.content.decode()
    assert BERLIN in html and 'name="timezone"' not in html  # shown, fixed once created


def test_the_admin_form_offers_utc_first_and_the_zones(admin_client):
    html = admin_client.get(reverse("admin:tasksapp_recurringtask_add")).content.decode()
    assert '<option value="UTC" selected>UTC</option>' in html
    assert '<option value="America/New_York">America/New_York</option>' in html


def test_the_list_shows_the_zone_beside_the_period(admin_client):
    berlin_task()
    recurring_task_create(name="plain", handler=HANDLER, period=dt.timedelta(hours=6))
    html = admin_client.get(reverse("dashboard:recurring-list")).content.decode()
    assert f'<span class="sub tz">{BERLIN}</span>' in html
    assert '<span class="sub tz">UTC</span>' in html


def test_the_plan_page_shows_the_local_day_and_its_23_hours(admin_client):
    task = berlin_task()
    url = reverse("dashboard:recurring-detail", args=[task.pk])
    html = admin_client.get(url, {"period": 1}).content.decode()
    assert "of Europe/Berlin's calendar days" in html
    assert "2026-03-29 00:00 → 2026-03-30 00:00 Europe/Berlin, 23\xa0hours" in html
    assert '03:00 – 03:00 <span class="sub">(skipped: runs at the jump)</span>' in html
    utc_page = admin_client.get(
        reverse(
            "dashboard:recurring-detail",
            args=[recurring_task_create(name="plain", handler=HANDLER, period=DAY).pk],
        )
    ).content.decode()
    assert 'id="task-timezone">(UTC)' in utc_page and "period-local" not in utc_page
