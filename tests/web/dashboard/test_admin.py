"""Django admin: every model listed, machine data read-only, actions through services."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.options import ERR_MAX_ATTEMPTS
from tasksapp.engine.retry import ERR_POLICY_DELAYS
from tasksapp.recurring.models import Member, RecurringTask
from tasksapp.recurring.services import member_create, recurring_task_create
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER, make_job

pytestmark = pytest.mark.django_db
UNREGISTERED = "Select a valid choice. sys.exit is not one of the available choices."

MODELS = [
    "job",
    "member",
    "recurringtask",
    "sliceplan",
    "dispatcher",
    "dispatchercounter",
    "workerprocess",
    "freeordinal",
    "operatoraction",
]


@pytest.fixture
def admin_client(roles) -> Client:
    user = User.objects.create_superuser("root", password="root-password-1")
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("model", MODELS)
def test_every_model_has_a_changelist(admin_client, activity, model):
    assert admin_client.get(reverse(f"admin:tasksapp_{model}_changelist")).status_code == 200


@pytest.mark.parametrize("model", ["sliceplan", "dispatcher", "workerprocess", "operatoraction"])
def test_machine_written_models_cannot_be_added(admin_client, model):
    assert admin_client.get(reverse(f"admin:tasksapp_{model}_add")).status_code == 403


def test_a_stored_job_is_read_only_in_the_admin(admin_client):
    job = make_job(JobState.SUCCEEDED)
    url = reverse("admin:tasksapp_job_change", args=[job.id])
    response = admin_client.get(url)
    assert response.status_code == 200
    assert not response.context["adminform"].form.fields  # every field is shown read-only
    response = admin_client.post(url, {"handler": "sys.exit", "state": "scheduled"})
    assert response.status_code == 403
    job.refresh_from_db()
    assert (job.handler, job.state) == (HANDLER, JobState.SUCCEEDED)
    delete = admin_client.post(reverse("admin:tasksapp_job_delete", args=[job.id]), {"post": "yes"})
    assert delete.status_code == 403 and Job.objects.filter(id=job.id).exists()


def test_a_stored_job_page_shows_its_state_attempts_errors_and_result(admin_client):
    job = make_job(
        JobState.DEAD,
        attempts=2,
        max_attempts=2,
        last_error="RuntimeError: card <declined>",
        errors=[{"attempt": 2, "kind": "error", "error": "card declined"}],
        result={"ok": False, "charged": None},
        payload={"fail_rate": 1.0},
    )
    body = admin_client.get(reverse("admin:tasksapp_job_change", args=[job.id])).content.decode()
    for label in ("State:", "Attempts:", "Max attempts:", "Last error:", "Errors (one per"):
        assert label in body
    assert "RuntimeError: card &lt;declined&gt;" in body
    assert "&quot;charged&quot;: null" in body and "&quot;ok&quot;: false" in body
    assert "&quot;fail_rate&quot;: 1.0" in body and "{'fail_rate'" not in body
    assert "&quot;error&quot;: &quot;card declined&quot;" in body


def _job_form(**overrides) -> dict:
    run_at = timezone.localtime(timezone.now() + dt.timedelta(hours=1))
    data = {
        "handler": HANDLER,
        "run_at_0": run_at.strftime("%Y-%m-%d"),
        "run_at_1": run_at.strftime("%H:%M:%S"),
        "payload": '{"n": 1}',
        "max_attempts": "3",
        "retry_policy": '{"delays": [1, 2]}',
        "delivery": "at_least_once",
        "time_limit": "",
        "idempotency_key": "",
    }
    return {**data, **overrides}


def test_a_job_added_in_the_admin_is_scheduled_by_the_service_and_audited(admin_client):
    response = admin_client.post(reverse("admin:tasksapp_job_add"), _job_form())
    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get()
    assert (job.handler, job.payload, job.retry_policy) == (HANDLER, {"n": 1}, {"delays": [1, 2]})
    assert job.state == JobState.SCHEDULED and job.idempotency_key
    action = OperatorAction.objects.get()
    assert (action.action, action.via, action.target_id) == ("schedule", "admin", str(job.id))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("handler", "no.such.handler", "Select a valid choice."),
        ("handler", "sys.exit", "Select a valid choice."),
        ("retry_policy", '{"delays": [1e300]}', ERR_POLICY_DELAYS),
        ("retry_policy", '"garbage"', "retry_policy must be an object"),
        ("max_attempts", "0", "max_attempts must be"),
    ],
)
def test_a_job_with_bad_input_is_not_added(admin_client, field, value, message):
    response = admin_client.post(reverse("admin:tasksapp_job_add"), _job_form(**{field: value}))
    assert response.status_code == 200
    assert message in response.content.decode().replace("&#x27;", "'")
    assert not Job.objects.exists() and not OperatorAction.objects.exists()


def test_job_admin_actions_call_the_services(admin_client):
    scheduled, dead = make_job(), make_job(JobState.DEAD)
    url = reverse("admin:tasksapp_job_changelist")
    admin_client.post(url, {"action": "cancel_jobs", "_selected_action": [scheduled.id]})
    admin_client.post(url, {"action": "retry_jobs", "_selected_action": [dead.id]})
    scheduled.refresh_from_db()
    dead.refresh_from_db()
    assert scheduled.state == JobState.CANCELLED and dead.state == JobState.SCHEDULED
    assert set(OperatorAction.objects.values_list("action", "via")) == {
        ("cancel", "admin"),
        ("retry", "admin"),
    }


def test_job_admin_action_refused_transition_is_a_warning(admin_client):
    done = make_job(JobState.SUCCEEDED)
    url = reverse("admin:tasksapp_job_changelist")
    response = admin_client.post(
        url, {"action": "cancel_jobs", "_selected_action": [done.id]}, follow=True
    )
    assert "only scheduled, failed, claimed or running jobs" in response.content.decode()
    assert not OperatorAction.objects.exists()


def test_viewer_staff_sees_no_job_actions(roles, viewer):
    viewer.is_staff = True
    viewer.save()
    client = Client()
    client.force_login(viewer)
    response = client.get(reverse("admin:tasksapp_job_changelist"))
    assert response.status_code == 200
    assert "cancel_jobs" not in response.content.decode()


def test_member_added_in_admin_gets_ordinal_and_phase_from_the_service(admin_client):
    member_create(external_id="first")
    response = admin_client.post(reverse("admin:tasksapp_member_add"), {"external_id": "second"})
    assert response.status_code == 302
    member = Member.objects.get(external_id="second")
    assert member.ordinal == 1 and 0 <= member.phase < 1


def test_member_actions_and_delete_use_the_services(admin_client):
    member = member_create(external_id="m1")
    url = reverse("admin:tasksapp_member_changelist")
    admin_client.post(url, {"action": "deactivate_members", "_selected_action": [member.id]})
    assert not Member.objects.get(id=member.id).active
    admin_client.post(reverse("admin:tasksapp_member_delete", args=[member.id]), {"post": "yes"})
    assert not Member.objects.filter(id=member.id).exists()
    from tasksapp.recurring.models import FreeOrdinal

    assert FreeOrdinal.objects.filter(ordinal=member.ordinal).exists()


def _task_form(**overrides) -> dict:
    data = {
        "name": "nightly",
        "handler": HANDLER,
        "payload": "{}",
        "max_attempts": "5",
        "retry_policy": "{}",
        "delivery": "transactional",
        "time_limit": "",
        "epoch_0": "2026-01-01",
        "epoch_1": "00:00:00",
        "period": "1 00:00:00",
        "slices": "24",
        "active": "on",
    }
    data.update(overrides)
    return data


def test_recurring_task_added_in_admin_goes_through_the_service(admin_client):
    response = admin_client.post(reverse("admin:tasksapp_recurringtask_add"), _task_form())
    assert response.status_code == 302
    task = RecurringTask.objects.get(name="nightly")
    assert task.period == dt.timedelta(days=1) and task.slices == 24


def test_recurring_task_refused_by_the_service_shows_its_message(admin_client):
    response = admin_client.post(
        reverse("admin:tasksapp_recurringtask_add"),
        _task_form(period="0 00:10:00", slices="20"),
    )
    assert response.status_code == 200
    assert "a slice must last at least 1 minute" in response.content.decode()
    assert not RecurringTask.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_attempts", "1001", ERR_MAX_ATTEMPTS),
        ("retry_policy", '{"delays": []}', ERR_POLICY_DELAYS),
        ("handler", "sys.exit", UNREGISTERED),
    ],
)
def test_recurring_task_with_a_bad_job_option_shows_it_on_the_field(
    admin_client, field, value, message
):
    response = admin_client.post(
        reverse("admin:tasksapp_recurringtask_add"), _task_form(**{field: value})
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert errors[field][0].startswith(message)
    assert not RecurringTask.objects.exists()


def test_recurring_task_change_goes_through_the_service(admin_client):
    task = recurring_task_create(name="nightly", handler=HANDLER, period=dt.timedelta(days=1))
    url = reverse("admin:tasksapp_recurringtask_change", args=[task.id])
    page = admin_client.get(url).content.decode()
    assert "tempo: plan due slices" in page  # the django-celery-beat entry
    epoch = timezone.localtime(task.epoch)
    form = _task_form(
        slices="12", epoch_0=epoch.strftime("%Y-%m-%d"), epoch_1=epoch.strftime("%H:%M:%S")
    )
    form.pop("name")
    response = admin_client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    task.refresh_from_db()
    assert task.slices == 12 or task.next_slices == 12


def test_recurring_task_admin_actions(admin_client):
    task = recurring_task_create(name="nightly", handler=HANDLER, period=dt.timedelta(days=1))
    url = reverse("admin:tasksapp_recurringtask_changelist")
    admin_client.post(url, {"action": "pause_tasks", "_selected_action": [task.id]})
    assert not RecurringTask.objects.get(id=task.id).active
    assert OperatorAction.objects.get().via == "admin"


def test_beat_admin_shows_the_planner_schedule(admin_client):
    url = reverse("admin:django_celery_beat_periodictask_changelist")
    assert "tempo: plan due slices" in admin_client.get(url).content.decode()


@pytest.mark.parametrize(
    "payload",
    ["[" * 100_000 + "]" * 100_000, "1" * 5000, '{"a": "\\u0000"}', '{"s": "\\ud800"}'],
    ids=["deep", "long-integer", "nul", "surrogate"],
)
def test_hostile_json_in_an_admin_form_is_a_form_error(admin_client, payload):
    response = admin_client.post(reverse("admin:tasksapp_job_add"), _job_form(payload=payload))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "/admin/tasksapp/job/?state__exact=%00",
        "/admin/tasksapp/job/?q=%00",
        "/admin/tasksapp/member/?q=a%00b",
        "/jobs/?handler=%00",
        "/api/jobs/?handler=%00",
    ],
)
def test_a_nul_in_the_query_string_is_a_400_everywhere(admin_client, url):
    """The admin by its middleware; the dashboard and the API by their own checks."""
    response = admin_client.get(url)
    assert response.status_code == 400
    body = response.content.decode()
    assert "control characters" in body or "Null characters are not allowed" in body


def test_job_admin_cancel_of_a_running_job_requests_it_and_cancels_graphs(admin_client):
    from tasksapp.graphs.models import GraphRun
    from tasksapp.graphs.services import graph_job_schedule

    running = make_job(JobState.RUNNING)
    graph = graph_job_schedule(has={"user_id": 7}, wants=["friends"])
    url = reverse("admin:tasksapp_job_changelist")
    admin_client.post(url, {"action": "cancel_jobs", "_selected_action": [running.id]})
    admin_client.post(url, {"action": "cancel_graphs", "_selected_action": [graph.job_id]})
    running.refresh_from_db()
    assert running.state == JobState.RUNNING and running.cancel_requested_at is not None
    assert GraphRun.objects.get(id=graph.id).state == "cancelled"
    assert sorted(OperatorAction.objects.values_list("action", "target_type")) == [
        ("cancel", "job"),
        ("cancel_graph", "graph"),
    ]
