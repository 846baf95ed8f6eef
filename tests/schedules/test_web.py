"""Schedules through the HTTP API, the dashboard and the admin: each write audited, bad
input a 400 naming its field, viewers refused (and the refusal recorded)."""

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.schedules.models import Schedule, ScheduleRun
from tasksapp.schedules.services import schedule_create
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER

pytestmark = pytest.mark.django_db
BODY = {"name": "nightly", "handler": HANDLER, "cron": "30 2 * * *", "timezone": "Europe/Berlin"}


def audit(action):
    return list(OperatorAction.objects.filter(action=action, target_type="schedule"))


def test_api_create_read_and_list(operator_api, viewer_api):
    response = operator_api.post("/api/schedules/", BODY, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["cron"] == "30 2 * * *" and body["catchup"] == "one" and body["overlap"] == "allow"
    assert body["in_words"] == "At 02:30, every day (Europe/Berlin)"
    assert len(body["next_fires"]) == 10
    first = dt.datetime.fromisoformat(body["next_fires"][0]["local"])
    assert (first.hour, first.minute) == (2, 30) or first.hour == 3  # 03:00 on a spring-forward day
    (created,) = audit("schedule_create")
    assert created.target_id == str(body["id"]) and created.details["cron"] == "30 2 * * *"
    listed = viewer_api.get("/api/schedules/").json()
    assert [s["name"] for s in listed] == ["nightly"]
    assert viewer_api.get(f"/api/schedules/{body['id']}/").json()["timezone"] == "Europe/Berlin"


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"cron": "61 * * * *"}, "cron", "cron '61 * * * *' is not valid"),
        ({"timezone": "Mars/Base"}, "timezone", "timezone must be an IANA zone"),
        ({"cron": "", "every_seconds": 0.5}, "every_seconds", "every must be a timedelta"),
        ({"every_seconds": 60}, "non_field_errors", "give exactly one of cron"),
        ({"catchup_window_seconds": 86400 * 8}, "catchup_window_seconds", "catchup_window must"),
        # seconds past a timedelta's range: the same refusal as any too long
        ({"cron": "", "every_seconds": 1e300}, "every_seconds", "every must be a timedelta"),
        ({"cron": "", "every_seconds": -1e300}, "every_seconds", "every must be a timedelta"),
        ({"jitter_seconds": 1e300}, "jitter_seconds", "jitter must be a timedelta"),
        ({"catchup_window_seconds": 1e300}, "catchup_window_seconds", "catchup_window must"),
    ],
)
def test_api_refuses_bad_input_naming_the_field(operator_api, body, field, message):
    response = operator_api.post("/api/schedules/", {**BODY, **body}, format="json")
    assert response.status_code == 400
    assert response.json()[field][0].startswith(message)
    assert not Schedule.objects.exists() and not audit("schedule_create")


def test_api_shows_a_schedule_that_starts_in_year_9999_with_no_fire_to_come(operator_api):
    body = {**BODY, "start_at": "9999-12-31T23:59:59Z"}
    response = operator_api.post("/api/schedules/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["next_fires"] == []
    schedule_id = response.json()["id"]
    edited = operator_api.patch(
        f"/api/schedules/{schedule_id}/", {"cron": "", "every_seconds": 86400 * 366}, format="json"
    )
    assert edited.status_code == 200 and edited.json()["next_fires"] == []


def test_api_edit_pause_resume_run_now_delete_are_audited(operator_api):
    schedule = schedule_create(name="s", handler=HANDLER, every=dt.timedelta(minutes=1))
    url = f"/api/schedules/{schedule.id}/"
    response = operator_api.patch(url, {"every_seconds": 120, "jitter_seconds": 5}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["every_seconds"] == 120 and response.json()["jitter_seconds"] == 5
    (edit,) = audit("schedule_edit")
    assert edit.details["changed"]["every"] == {"before": 60.0, "after": 120.0}
    assert operator_api.post(url + "pause/").json()["active"] is False
    assert operator_api.post(url + "resume/").json()["active"] is True
    run = operator_api.post(url + "run-now/").json()
    assert run["outcome"] == "run_now" and Job.objects.filter(id=run["job_id"]).exists()
    runs = operator_api.get(url + "runs/").json()
    (listed,) = [r for r in runs if r["job_id"] == run["job_id"]]
    assert listed["outcome"] == "run_now" and listed["job_state"] == "scheduled"
    deleted = operator_api.delete(url).json()
    assert deleted["name"] == "s" and deleted["jobs_cancelled"] >= 1
    assert Job.objects.get(id=run["job_id"]).state == JobState.CANCELLED
    actions = OperatorAction.objects.filter(target_id=str(schedule.id)).values_list(
        "action", flat=True
    )
    assert sorted(actions) == sorted(
        [
            "schedule_edit",
            "schedule_pause",
            "schedule_resume",
            "schedule_run_now",
            "schedule_delete",
        ]
    )
    assert operator_api.get(url).status_code == 404
    assert operator_api.post(url + "pause/").status_code == 404


def test_api_fire_times_are_the_planners(viewer_api):
    schedule = schedule_create(
        name="ny", handler=HANDLER, cron="30 1 * * *", timezone="America/New_York"
    )
    response = viewer_api.get(
        f"/api/schedules/{schedule.id}/fire-times/",
        {"start": "2026-10-31T00:00:00Z", "end": "2026-11-02T23:59:59Z"},
    )
    assert response.json() == [
        "2026-10-31T05:30:00+00:00",
        "2026-11-01T05:30:00+00:00",  # 01:30 EDT, the first of the two 01:30s
        "2026-11-02T06:30:00+00:00",
    ]
    bad = viewer_api.get(
        f"/api/schedules/{schedule.id}/fire-times/",
        {"start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"},
    )
    assert bad.status_code == 400


def test_api_viewer_may_read_but_not_write(viewer_api, viewer):
    response = viewer_api.post("/api/schedules/", BODY, format="json")
    assert response.status_code == 403 and not Schedule.objects.exists()
    (refusal,) = OperatorAction.objects.filter(action="denied:schedule_create")
    assert refusal.username == viewer.username


def test_dashboard_shows_fire_times_in_both_zones_words_and_runs(viewer_client):
    schedule = schedule_create(
        name="berlin", handler=HANDLER, cron="* * * * *", timezone="Europe/Berlin"
    )
    page = viewer_client.get(f"/schedules/{schedule.id}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "Every minute" in html and "Europe/Berlin" in html
    fires = html.split('id="next-fires"')[1].split("</table>")[0]
    assert fires.count("<tr><td>") == 10  # ten fire times, in its zone and in UTC
    runs = html.split('id="last-runs"')[1].split("</table>")[0]
    planned = ScheduleRun.objects.filter(schedule=schedule).count()
    assert planned >= 1 and runs.count("<tr>") == 1 + planned  # the heading, then each run
    assert ("CET" in html or "CEST" in html) and 'id="last-runs"' in html
    listing = viewer_client.get("/schedules/").content.decode()
    assert "berlin" in listing and 'href="/schedules/' in listing


def test_dashboard_actions_are_audited_and_refused_to_viewers(operator_client, viewer_client):
    schedule = schedule_create(name="acted", handler=HANDLER, cron="*/10 * * * *")
    assert viewer_client.post(f"/schedules/{schedule.id}/pause/").status_code == 403
    assert OperatorAction.objects.filter(action="denied:schedule_pause").count() == 1
    operator_client.post(f"/schedules/{schedule.id}/pause/")
    assert not Schedule.objects.get(id=schedule.id).active and audit("schedule_pause")
    operator_client.post(f"/schedules/{schedule.id}/run-now/")
    assert ScheduleRun.objects.filter(schedule=schedule, outcome="run_now").count() == 1
    response = operator_client.post(f"/schedules/{schedule.id}/delete/")
    assert response.status_code == 302 and not Schedule.objects.exists()
    assert audit("schedule_delete")


def test_admin_adds_and_edits_through_the_services():
    admin_user = User.objects.create_superuser("root", password="root-password-1")
    client = Client()
    client.force_login(admin_user)
    form = {
        "name": "from-admin",
        "handler": HANDLER,
        "payload": "{}",
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
        "jitter": "0",
        "catchup": "one",
        "catchup_window": "01:00:00",
        "overlap": "allow",
        "active": "on",
        "max_attempts": "5",
        "retry_policy": "{}",
        "delivery": "transactional",
        "queue": "default",
        "priority": "5",
        "concurrency_key": "",
    }
    refused = client.post("/admin/tasksapp/schedule/add/", {**form, "cron": "0 3 * *"})
    assert refused.status_code == 200 and "cron must have 5 fields" in refused.content.decode()
    assert not Schedule.objects.exists()
    response = client.post("/admin/tasksapp/schedule/add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    schedule = Schedule.objects.get(name="from-admin")
    # decided by the service: its next fire time is the next 03:00 in Berlin
    assert schedule.next_fire_at > timezone.now()
    assert schedule.next_fire_at.astimezone(ZoneInfo("Europe/Berlin")).hour == 3
    assert audit("schedule_create")[0].via == "admin"


FORM = {
    "name": "from-form",
    "handler": HANDLER,
    "cron": "30 2 * * *",
    "every_seconds": "",
    "timezone": "Europe/Berlin",
    "start_at": "",
    "end_at": "",
    "jitter_seconds": "5",
    "catchup": "all",
    "catchup_window_seconds": "7200",
    "overlap": "skip",
    "active": "on",
    "payload": '{"format": "csv"}',
    "queue": "default",
    "priority": "7",
    "max_attempts": "3",
    "delivery": "at_least_once",
    "time_limit": "600",
}


def test_dashboard_form_creates_a_schedule_through_the_audited_service(operator_client):
    page = operator_client.get("/schedules/new/")
    html = page.content.decode()
    assert page.status_code == 200 and "csrfmiddlewaretoken" in html
    assert f'<option value="{HANDLER}">' in html  # the registered handlers offered
    assert 'action="/schedules/new/"' in html and 'method="post"' in html
    response = operator_client.post("/schedules/new/", {**FORM, "end_at": "2027-01-31T23:00"})
    schedule = Schedule.objects.get(name="from-form")
    assert response.status_code == 302 and response.url == f"/schedules/{schedule.id}/"
    assert (schedule.cron, schedule.timezone, schedule.overlap) == (
        "30 2 * * *",
        "Europe/Berlin",
        "skip",
    )
    assert schedule.catchup == "all" and schedule.catchup_window == dt.timedelta(hours=2)
    assert schedule.jitter == dt.timedelta(seconds=5) and schedule.payload == {"format": "csv"}
    assert (schedule.priority, schedule.max_attempts, schedule.time_limit) == (7, 3, 600.0)
    assert schedule.delivery == "at_least_once" and schedule.active
    # a time without an offset is the schedule's zone's wall time: 23:00 CET is 22:00 UTC
    assert schedule.end_at == dt.datetime(2027, 1, 31, 22, tzinfo=dt.UTC)
    (created,) = audit("schedule_create")
    assert created.via == "dashboard" and created.target_id == str(schedule.id)
    detail = operator_client.get(response.url).content.decode()
    assert "created: its fire times are planned" in detail and 'id="next-fires"' in detail
    assert f'href="/schedules/{schedule.id}/edit/"' in detail


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"cron": "61 * * * *"}, "cron", "cron '61 * * * *' is not valid"),
        ({"cron": "0 3 * *"}, "cron", "cron must have 5 fields"),
        ({"every_seconds": "60"}, "cron", "give exactly one of cron"),
        ({"cron": "", "every_seconds": "0.5"}, "every_seconds", "every must be a timedelta"),
        ({"cron": "", "every_seconds": "often"}, "every_seconds", "every must be a number"),
        ({"timezone": "Mars/Base"}, "timezone", "timezone must be an IANA zone"),
        ({"handler": "no.such.handler"}, "handler", "handler 'no.such.handler' is not registered"),
        ({"payload": "{not json"}, "payload", "Enter a valid JSON"),
        ({"start_at": "tomorrow"}, "start_at", "enter a date and time such as"),
        (
            {"start_at": "2027-01-02T00:00", "end_at": "2027-01-01T00:00"},
            "end_at",
            "end_at must be after start_at",
        ),
        ({"catchup": "sometimes"}, "catchup", "Select a valid choice"),
        ({"catchup_window_seconds": str(86400 * 8)}, "catchup_window_seconds", "catchup_window"),
        ({"jitter_seconds": "1e300"}, "jitter_seconds", "jitter must be a timedelta"),
        ({"priority": "12"}, "priority", "priority must be an integer from 0"),
        ({"queue": "Bad Queue"}, "queue", "queue must be 1-64 characters"),
        ({"time_limit": "-1"}, "time_limit", "time_limit must be a positive number"),
    ],
)
def test_dashboard_form_refuses_bad_input_at_its_field_and_stores_nothing(
    operator_client, change, field, message
):
    response = operator_client.post("/schedules/new/", {**FORM, **change})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert errors[field][0].startswith(message), errors
    html = response.content.decode()
    assert 'id="form-errors"' in html and 'class="field-error"' in html
    assert f'value="{FORM["name"]}"' in html  # the input is shown again, to correct
    assert not Schedule.objects.exists() and not Job.objects.exists()
    assert not audit("schedule_create")


def test_dashboard_form_refuses_a_name_taken(operator_client):
    schedule_create(name="from-form", handler=HANDLER, cron="0 * * * *")
    response = operator_client.post("/schedules/new/", FORM)
    assert response.status_code == 400
    assert response.context["form"].errors["name"] == [
        "a schedule named 'from-form' already exists."
    ]
    assert Schedule.objects.count() == 1


def test_dashboard_form_edits_from_the_next_unplanned_fire(operator_client):
    schedule = schedule_create(
        name="edited", handler=HANDLER, every=dt.timedelta(minutes=1), payload={"v": 1}
    )
    planned = dict(Job.objects.values_list("id", "payload__payload"))
    page = operator_client.get(f"/schedules/{schedule.id}/edit/").content.decode()
    assert 'value="60"' in page and "{&quot;v&quot;: 1}" in page  # its values to edit
    form = {**FORM, "name": "edited", "cron": "", "every_seconds": "120", "payload": '{"v": 2}'}
    response = operator_client.post(f"/schedules/{schedule.id}/edit/", form)
    assert response.status_code == 302, response.context["form"].errors
    schedule.refresh_from_db()
    assert schedule.every == dt.timedelta(minutes=2) and schedule.payload == {"v": 2}
    after = dict(Job.objects.values_list("id", "payload__payload"))
    assert {job_id: after[job_id] for job_id in planned} == planned  # kept as planned
    (edit,) = audit("schedule_edit")
    assert edit.via == "dashboard"
    assert edit.details["changed"]["every"] == {"before": 60.0, "after": 120.0}
    assert edit.details["changed"]["payload"] == {"before": {"v": 1}, "after": {"v": 2}}
    bad = {**form, "cron": "* *", "every_seconds": ""}
    refused = operator_client.post(f"/schedules/{schedule.id}/edit/", bad)
    assert refused.status_code == 400 and "cron must have 5 fields" in refused.content.decode()
    schedule.refresh_from_db()
    assert schedule.every == dt.timedelta(minutes=2) and len(audit("schedule_edit")) == 1


def test_dashboard_form_is_for_operators_only(viewer_client, viewer):
    schedule = schedule_create(name="kept", handler=HANDLER, cron="0 * * * *")
    assert viewer_client.get("/schedules/new/").status_code == 403
    assert viewer_client.get(f"/schedules/{schedule.id}/edit/").status_code == 403
    assert viewer_client.post("/schedules/new/", FORM).status_code == 403
    edit = viewer_client.post(f"/schedules/{schedule.id}/edit/", {**FORM, "name": "taken"})
    assert edit.status_code == 403
    assert Schedule.objects.get().name == "kept" and not Schedule.objects.filter(name="taken")
    refusals = OperatorAction.objects.filter(username=viewer.username).order_by("id")
    assert [(r.action, r.target_type) for r in refusals] == [
        ("denied:schedule_create", "url"),
        ("denied:schedule_edit", "schedule"),
    ]
    assert refusals[1].target_id == str(schedule.id)
    listing = viewer_client.get("/schedules/").content.decode()
    assert "/schedules/new/" not in listing  # no link to a form the viewer may not use


def test_dashboard_form_needs_the_csrf_token(operator):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post("/schedules/new/", FORM).status_code == 403
    assert not Schedule.objects.exists()
