"""What a security probe of the dashboard and the API found, each shown fixed: a wait
that held the web workers, an audit row without a target that broke the audit page,
tokens made and revoked for others, large payloads read to be measured, any lookup in
the admin's address, refusals recorded without bound, 500s on hostile input, a CSRF page
for token clients, static files without the pages' headers."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import time

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import TextField
from django.db.models.functions import Cast, Length
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from tasksapp.engine.models import Job, JobState, RoutingMode
from tasksapp.graphs.services import graph_job_schedule
from tasksapp.web.models import ApiToken, OperatorAction
from tasksapp.web.operators import (
    ERR_AUDIT_TARGET,
    ERR_TOKEN_FOR_OTHER,
    ERR_TOKEN_NOT_YOURS,
    REFUSALS_RECORDED_PER_MINUTE,
    acting_token,
    api_token_create_audited,
    api_token_revoke_audited,
    operator_action_record,
)
from tasksapp.web.selectors.jobs import JobFilters, job_page
from tasksapp.web.tokens import TokenInputError, api_token_issue
from tests.web.dashboard.fixtures import *  # noqa: F403
from tests.web.dashboard.fixtures import _user, api_client_for, make_job

pytestmark = pytest.mark.django_db

HAS = {"user_id": 7, "latency_scale": 0, "failure_rate": 0}


def _token_client(user: User) -> tuple[APIClient, ApiToken]:
    token, key = api_token_issue(owner=user, name="probe", trusted=True)
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client, token


def _session_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def root(roles) -> User:
    return User.objects.create_superuser("root", password="root-password-1")


@pytest.fixture
def other_operator(roles) -> User:
    return _user("olga", "operator")


# --- M1: a wait holds a web worker two seconds at most, one per user ------------------


@pytest.fixture
def pending_graph_job(db) -> Job:
    return graph_job_schedule(has=HAS, wants=["friends"]).job


def _wait(client, job: Job, timeout) -> tuple[float, object]:
    started = time.monotonic()
    response = client.get(f"/api/graph-jobs/{job.id}/wait/", {"timeout": timeout})
    return time.monotonic() - started, response


def test_a_long_wait_is_a_short_poll_that_answers_the_current_state(viewer_api, pending_graph_job):
    from tasksapp.web.api.waits import WAIT_MOST_SECONDS

    elapsed, response = _wait(viewer_api, pending_graph_job, 10)
    assert response.status_code == 200
    assert response.data["done"] is False and response.data["graph"]["state"] == "pending"
    assert WAIT_MOST_SECONDS <= 2.0 and elapsed < WAIT_MOST_SECONDS + 1.5


def test_a_users_second_wait_at_once_answers_without_waiting(viewer, pending_graph_job):
    from tasksapp.web.api.waits import graph_wait_slot

    client = api_client_for(viewer)
    with graph_wait_slot(user=viewer) as held:  # another request of the user's, waiting
        assert held
        elapsed, response = _wait(client, pending_graph_job, 10)
    assert response.status_code == 200 and response.data["done"] is False
    assert elapsed < 1.0
    with graph_wait_slot(user=viewer) as held:  # given back: free again
        assert held


@pytest.mark.parametrize("timeout", ["NaN", "nan", "inf", "-inf", "61"])
def test_a_timeout_that_is_no_number_of_seconds_is_a_400(viewer_api, pending_graph_job, timeout):
    _, response = _wait(viewer_api, pending_graph_job, timeout)
    assert response.status_code == 400 and "timeout" in response.json()


def test_the_docs_describe_the_short_poll(settings):
    from tasksapp.web.api.waits import WAIT_MOST_SECONDS

    dashboard = (settings.BASE_DIR / "docs" / "DASHBOARD.md").read_text()
    assert "short poll" in dashboard and f"never more than {WAIT_MOST_SECONDS:g} s" in dashboard


# --- M2: every audit row names a target; the audit page shows any row -------------------


def test_a_refused_api_create_by_a_user_without_a_role_names_its_url(stranger, viewer_client):
    client, _ = _token_client(stranger)
    response = client.post("/api/jobs/", {"handler": "x"}, format="json")
    assert response.status_code == 403
    record = OperatorAction.objects.get()
    assert (record.action, record.target_type, record.target_id) == (
        "denied:job_create",
        "url",
        "/api/jobs/",
    )
    page = viewer_client.get(reverse("dashboard:audit"))
    assert page.status_code == 200 and "/api/jobs/" in page.content.decode()


def test_a_refused_routing_change_names_the_mode_like_the_audited_one(viewer, viewer_client):
    client, _ = _token_client(viewer)
    assert client.post("/api/routing/degrade/", {}, format="json").status_code == 403
    assert viewer_client.post("/queues/mode/degrade/").status_code == 403
    assert set(OperatorAction.objects.values_list("target_type", "target_id")) == {
        ("routing", "mode")
    }


@pytest.mark.parametrize("target_id", ["", None])
def test_a_row_without_a_target_is_never_stored(operator, target_id):
    with pytest.raises(ValueError, match=ERR_AUDIT_TARGET):
        operator_action_record(
            user=operator, via="api", action="cancel", target_type="job", target_id=target_id
        )
    assert not OperatorAction.objects.exists()


def test_the_audit_page_shows_rows_stored_before_the_check(viewer_client, operator):
    job = make_job()
    for target_type, target_id in [
        ("job", ""),
        ("job", "1,2,3"),
        ("job", "99999999999999999999999"),
        ("job", "0"),
        ("job", "²"),
        ("recurring_task", "nightly"),
        ("", ""),
        ("job", str(job.id)),
    ]:
        OperatorAction.objects.create(
            user=operator,
            username=operator.username,
            via="api",
            action="denied:job_create",
            target_type=target_type,
            target_id=target_id,
        )
    page = viewer_client.get(reverse("dashboard:audit"))
    assert page.status_code == 200
    html = page.content.decode()
    assert re.findall(r'href="/jobs/[^"]+"', html) == [f'href="/jobs/{job.id}/"']
    assert "job 1,2,3" in html and "recurring_task nightly" in html


# --- M4: tokens for oneself; each API action's record names its token -----------------


def test_an_operator_cannot_make_a_token_that_acts_as_another_operator(
    operator_client, operator, other_operator
):
    form = reverse("dashboard:token-create")
    page = operator_client.get(reverse("dashboard:tokens")).content.decode()
    assert 'value="otto"' in page and 'value="olga"' not in page  # offered: oneself
    response = operator_client.post(form, {"name": "as olga", "user": "olga"})
    assert response.status_code == 400
    with pytest.raises(TokenInputError) as refused:
        api_token_create_audited(user=operator, owner=other_operator, name="as olga", via="api")
    assert str(refused.value) == ERR_TOKEN_FOR_OTHER.format(owner="olga")
    assert not ApiToken.objects.exists() and not OperatorAction.objects.exists()
    assert operator_client.post(form, {"name": "mine", "user": "otto"}).status_code == 200
    assert ApiToken.objects.get().user == operator


def test_a_superuser_makes_a_token_for_another_user(root, viewer):
    client = _session_client(root)
    response = client.post(reverse("dashboard:token-create"), {"name": "scraper", "user": "vera"})
    assert response.status_code == 200
    assert ApiToken.objects.get().user == viewer


def test_an_operator_revokes_their_own_tokens_only(operator, operator_client, root, other_operator):
    roots, _ = api_token_issue(owner=root, name="root's", trusted=True)
    olgas, _ = api_token_issue(owner=other_operator, name="olga's")
    own, _ = api_token_issue(owner=operator, name="mine")
    for token in (roots, olgas):
        with pytest.raises(TokenInputError) as refused:
            api_token_revoke_audited(user=operator, token_id=token.id, via="dashboard")
        owner = token.user.username
        assert str(refused.value) == ERR_TOKEN_NOT_YOURS.format(token=token, owner=owner)
        response = operator_client.post(reverse("dashboard:token-revoke", args=[token.id]))
        assert response.status_code == 302
    admin_client = _session_client(operator)
    operator.is_staff = True
    operator.save()
    admin_client.post(
        reverse("admin:tasksapp_apitoken_changelist"),
        {"action": "revoke_tokens", "_selected_action": [roots.id, olgas.id]},
    )
    assert ApiToken.objects.filter(revoked_at__isnull=False).count() == 0
    assert not OperatorAction.objects.filter(action="token_revoke").exists()
    page = operator_client.get(reverse("dashboard:tokens")).content.decode()
    assert f'id="revoke-{own.id}"' in page and f'id="revoke-{roots.id}"' not in page
    operator_client.post(reverse("dashboard:token-revoke", args=[own.id]))
    own.refresh_from_db()
    assert own.revoked_at is not None


def test_a_superuser_revokes_anyones_token(root, operator):
    token, _ = api_token_issue(owner=operator, name="otto's")
    api_token_revoke_audited(user=root, token_id=token.id, via="dashboard")
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_each_api_action_records_the_token_it_was_taken_with(operator, viewer):
    job = make_job()
    client, token = _token_client(operator)
    assert client.post(f"/api/jobs/{job.id}/cancel/").status_code == 200
    viewers, viewer_token = _token_client(viewer)
    assert viewers.post(f"/api/jobs/{job.id}/retry/").status_code == 403
    done, refused = OperatorAction.objects.order_by("id")
    assert (done.action, done.username) == ("cancel", "otto")
    assert done.details["token"] == {"id": token.id, "prefix": token.prefix}
    assert refused.action == "denied:retry"
    assert refused.details["token"] == {"id": viewer_token.id, "prefix": viewer_token.prefix}
    assert acting_token.get() is None  # nothing left behind for the next request


def test_an_action_through_a_session_names_no_token(operator, operator_client):
    job = make_job()
    api = APIClient()
    api.force_login(operator)
    assert api.post(f"/api/jobs/{job.id}/cancel/").status_code == 200
    assert "token" not in OperatorAction.objects.get().details


# --- list pages measure large JSON without reading it ----------------------------------


def _toast_blocks_read() -> int:
    """Blocks of the jobs table's TOAST read so far in this transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_blocks_fetched(reltoastrelid) FROM pg_class"
            " WHERE oid = %s::regclass",
            [Job._meta.db_table],
        )
        return cursor.fetchone()[0]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's TOAST")
def test_the_api_list_does_not_read_a_megabyte_payload_to_measure_it(db):
    noise = base64.b64encode(os.urandom(750_000)).decode()  # 1 MB that does not compress
    large = make_job(JobState.SUCCEEDED, payload={"s": noise})
    small = make_job(JobState.SUCCEEDED, payload={"n": 1})
    before = _toast_blocks_read()
    page = job_page(filters=JobFilters(), columns=None, json_inline_chars=16_384)
    read = _toast_blocks_read() - before
    by_id = {job.id: job for job in page.jobs}
    assert by_id[large.id].payload is None and by_id[large.id].omitted_json == ("payload",)
    assert by_id[small.id].payload == {"n": 1}
    # What reading the payload to measure it costs: its 1 MB in TOAST pages.
    before = _toast_blocks_read()
    measured = Job.objects.filter(id=large.id).annotate(n=Length(Cast("payload", TextField())))
    assert list(measured.values_list("n", flat=True)) == [len(json.dumps({"s": noise}))]
    assert _toast_blocks_read() - before > 100
    assert read == 0


# --- the admin's lists filter by their declared filters only ---------------------------


@pytest.mark.parametrize(
    "query",
    ["payload__icontains=x", "handler__regex=[", "handler=x", "idempotency_key__gt=a"],
)
def test_the_admin_job_list_refuses_lookups_it_does_not_declare(root, query):
    make_job()
    response = _session_client(root).get(f"/admin/tasksapp/job/?{query}")
    assert response.status_code == 400


def test_the_admin_lists_keep_their_declared_filters(root):
    make_job(JobState.DEAD)
    client = _session_client(root)
    assert client.get("/admin/tasksapp/job/?state__exact=dead").status_code == 200
    assert client.get("/admin/tasksapp/job/?delivery__exact=at_least_once").status_code == 200
    assert client.get("/admin/tasksapp/apitoken/?revoked_at__isempty=1").status_code == 200
    assert client.get("/admin/tasksapp/operatoraction/?via__exact=api").status_code == 200
    assert client.get("/admin/tasksapp/sliceplan/?task__id__exact=1").status_code == 200
    assert client.get("/admin/tasksapp/operatoraction/?details__icontains=a").status_code == 400


# --- refused attempts: recorded up to a rate, the rest counted -------------------------


def test_refusals_past_the_rate_are_counted_not_recorded(viewer):
    client, _ = _token_client(viewer)
    job = make_job()
    start = timezone.now().replace(second=5)
    with time_machine.travel(start, tick=False):
        for _ in range(REFUSALS_RECORDED_PER_MINUTE + 20):
            assert client.post(f"/api/jobs/{job.id}/cancel/").status_code == 403
    assert OperatorAction.objects.count() == REFUSALS_RECORDED_PER_MINUTE
    with time_machine.travel(start + dt.timedelta(minutes=1), tick=False):
        assert client.post(f"/api/jobs/{job.id}/cancel/").status_code == 403
    latest = OperatorAction.objects.order_by("-id").first()
    assert latest.details["unrecorded_before"] == 20
    assert OperatorAction.objects.count() == REFUSALS_RECORDED_PER_MINUTE + 1


# --- hostile input: 400s, not 500s ------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        {"reason": "a\x00b", "critical_priority": "9"},
        {"reason": "x" * 201, "critical_priority": "9"},
        {"reason": "ok", "critical_priority": "9\x00"},
    ],
)
def test_a_degrade_form_with_bad_text_is_a_400(operator_client, form):
    response = operator_client.post("/queues/mode/degrade/", form)
    assert response.status_code == 400 and response["Content-Type"].startswith("text/plain")
    assert not RoutingMode.objects.filter(degraded=True).exists()
    assert not OperatorAction.objects.exists()


@pytest.mark.parametrize("priority", ["²", "٣", "12", "urgent"])
def test_a_degrade_form_with_a_priority_no_level_names_is_refused(operator_client, priority):
    response = operator_client.post(
        "/queues/mode/degrade/", {"reason": "probe", "critical_priority": priority}, follow=True
    )
    assert response.status_code == 200
    assert "critical_priority" in response.content.decode()
    assert not RoutingMode.objects.filter(degraded=True).exists()


def test_a_degrade_form_with_ascii_digits_or_a_level_still_works(operator_client):
    response = operator_client.post(
        "/queues/mode/degrade/", {"reason": "r", "critical_priority": "7"}
    )
    assert response.status_code == 302
    assert RoutingMode.objects.get(id=1).critical_priority == 7
    form = {"reason": "r", "critical_priority": "critical"}
    assert operator_client.post("/queues/mode/degrade/", form).status_code == 302
    assert RoutingMode.objects.get(id=1).critical_priority == 9


def test_a_nul_in_an_address_is_a_400(operator_client, operator):
    response = operator_client.post("/queues/%00/pause/")
    assert response.status_code == 400
    client, _ = _token_client(operator)
    response = client.post("/api/queues/%00/pause/")
    assert response.status_code == 400 and "NUL" in response.json()["detail"]


# --- the API answers JSON, never a CSRF page --------------------------------------------


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_a_write_to_no_api_endpoint_is_a_json_404(operator, method):
    client, _ = _token_client(operator)
    response = getattr(client, method)("/api/no-such-endpoint/", {}, format="json")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert "no API endpoint" in response.json()["detail"]


def test_csrf_still_guards_the_dashboard(operator):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    job = make_job()
    assert client.post(f"/jobs/{job.id}/cancel/").status_code == 403
    api = APIClient(enforce_csrf_checks=True)
    api.force_login(operator)  # a session, not a token: DRF asks for the CSRF token
    assert api.post(f"/api/jobs/{job.id}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.state == JobState.SCHEDULED


# --- static files carry the pages' headers ------------------------------------------------


def test_static_files_have_the_csp_and_frame_headers(settings, client):
    settings.WHITENOISE_USE_FINDERS = True  # serve static/ as collected files are served
    response = client.get("/static/dashboard/dashboard.css")
    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
