"""Hostile input is refused, never a server error, and one job's bad data never hurts
another's pages: every dashboard parameter with every hostile value answers < 500 (the
bad ones 400, with the message shown); the API refuses bad bodies with 400/413 JSON and
answers every error in JSON; list answers stay small."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from tasksapp.engine.models import Job
from tasksapp.engine.settings import tempo_settings
from tasksapp.recurring.services import member_create, recurring_task_create
from tasksapp.web.api import serializers as api_serializers
from tasksapp.web.api.parsers import BODY_HEADROOM
from tasksapp.web.models import OperatorAction
from tasksapp.web.selectors.jobs import MAX_PAGE_SIZE, JobFilters, job_get, job_page
from tests.web.dashboard.fixtures import *  # noqa: F403
from tests.web.dashboard.fixtures import HANDLER, make_job

pytestmark = pytest.mark.django_db

HOSTILE = [
    "\x00",
    "a\x00b",
    "²",
    "٣",  # an Arabic-Indic digit: int() takes it, the database does not
    "-1",
    "0",
    "10000000",
    "9999999999999999999999",
    "'; drop table tasksapp_job; --",
    "x" * 5000,
    "<script>window.__xss=1</script>",
    "\u202eevil",
    "%",
    " ",
    "9999-12-31T23:59:59-23:00",
    "0001-01-01T00:00:00+05:00",
    "2026-02-30",
]
# Raw query strings the test client would not build: bytes that are not UTF-8, an
# encoded lone surrogate, a parameter given many times.
RAW_QUERIES = ["{name}=%ff%fe", "{name}=%ED%A0%80", "{name}=1&{name}=%00", "{name}"]

# Each dashboard page and the GET parameters it reads ("-": it reads none; sent anyway).
DASHBOARD = [
    ("dashboard:overview", ["-"]),
    ("dashboard:overview-data", ["-"]),
    ("dashboard:recurring-list", ["-"]),
    ("dashboard:recurring-detail", ["period", "member"]),
    ("dashboard:job-list", ["state", "handler", "task", "member", "run_at_from", "run_at_to"]),
    ("dashboard:job-list", ["cursor"]),
    ("dashboard:job-detail", ["-"]),
    ("dashboard:audit", ["before"]),
]


@pytest.fixture
def world(operator):
    """A little of everything a page may show."""
    task = recurring_task_create(
        name="nightly",
        handler=HANDLER,
        period=dt.timedelta(days=1),
        slices=4,
        epoch=timezone.now().replace(hour=0, minute=0, second=0, microsecond=0),
    )
    member_create(external_id="m-1")
    job = make_job(payload={"n": 1})
    OperatorAction.objects.create(
        user=operator,
        username=operator.username,
        action="job.cancel",
        target_type="job",
        target_id=str(job.id),
        details={"note": "<script>window.__xss=1</script>"},
    )
    return {"task": task, "job": job}


def _args(name: str, world) -> list[int]:
    if name == "dashboard:recurring-detail":
        return [world["task"].id]
    if name == "dashboard:job-detail":
        return [world["job"].id]
    return []


@pytest.mark.parametrize(
    ("name", "param"),
    [(name, param) for name, params in DASHBOARD for param in params],
)
def test_every_dashboard_parameter_with_every_hostile_value_answers_below_500(
    viewer_client, world, name, param
):
    url = reverse(name, args=_args(name, world))
    failures = []
    for value in HOSTILE:
        response = viewer_client.get(url, {param: value})
        if response.status_code >= 500:
            failures.append((value[:40], response.status_code))
    for raw in RAW_QUERIES:
        response = viewer_client.get(f"{url}?{raw.format(name=param)}")
        if response.status_code >= 500:
            failures.append((raw, response.status_code))
    assert not failures


@pytest.mark.parametrize(
    ("name", "query", "message"),
    [
        ("dashboard:job-list", {"handler": "\x00"}, "handler: control characters"),
        ("dashboard:job-list", {"member": "\x00"}, "member: control characters"),
        ("dashboard:job-list", {"task": "²"}, "task must be a whole number from 1 to"),
        ("dashboard:job-list", {"handler": "h" * 5000}, "handler: at most 200 characters"),
        ("dashboard:job-list", {"run_at_from": "²"}, "run_at_from: not a date and time"),
        (
            "dashboard:job-list",
            {"run_at_to": "9999-12-31T23:59:59-23:00"},
            "run_at_to: a date and time between 1970 and 9000",
        ),
        ("dashboard:job-list", {"cursor": "\x00"}, "cursor: control characters"),
        ("dashboard:job-list", {"cursor": "OTk5OS0xMi0zMVQyMzo1OTo1OS0yMzowMHwx"}, "cursor is"),
        ("dashboard:audit", {"before": "²"}, "before must be a whole number from 1 to"),
        (
            "dashboard:audit",
            {"before": "9999999999999999999999"},
            "before must be a whole number",
        ),
        (
            "dashboard:recurring-detail",
            {"period": "10000000"},
            "period must be a whole number from 0 to",
        ),
        ("dashboard:recurring-detail", {"member": "\x00"}, "member: control characters"),
    ],
)
def test_a_bad_parameter_is_a_400_page_that_says_which(viewer_client, world, name, query, message):
    response = viewer_client.get(reverse(name, args=_args(name, world)), query)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_the_reported_cases_are_refused(viewer_client, world):
    jobs = reverse("dashboard:job-list")
    for query in ("handler=%00", "member=%00", "task=%C2%B2"):
        assert viewer_client.get(f"{jobs}?{query}").status_code == 400
    assert viewer_client.get(f"{reverse('dashboard:audit')}?before=%C2%B2").status_code == 400
    plan = reverse("dashboard:recurring-detail", args=[world["task"].id])
    assert viewer_client.get(f"{plan}?period=10000000").status_code == 400


def test_good_parameters_still_work(viewer_client, world):
    plan = reverse("dashboard:recurring-detail", args=[world["task"].id])
    assert viewer_client.get(plan, {"period": "3", "member": "m-1"}).status_code == 200
    jobs = reverse("dashboard:job-list")
    response = viewer_client.get(jobs, {"task": str(world["task"].id), "run_at_from": "2020-01-01"})
    assert response.status_code == 200
    assert viewer_client.get(reverse("dashboard:audit"), {"before": "5"}).status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/jobs/99999999999999999999999/",
        "/recurring/99999999999999999999999/",
        "/jobs/0/",
        "/recurring/0/?period=1",
    ],
)
def test_ids_beyond_any_row_in_the_path_are_404(viewer_client, path):
    assert viewer_client.get(path).status_code == 404


def test_actions_on_ids_beyond_any_row_answer_below_500(operator_client):
    for path in (
        "/jobs/99999999999999999999999/cancel/",
        "/recurring/99999999999999999999999/pause/",
    ):
        assert operator_client.post(path).status_code < 500


def test_login_next_parameter(client, viewer):
    for value in HOSTILE + ["//evil.example/", "javascript:alert(1)"]:
        assert client.get("/login/", {"next": value}).status_code < 500


# --- rows stored before the checks --------------------------------------------------


@pytest.mark.skipif(
    connection.vendor != "sqlite", reason="only SQLite ever stored a lone surrogate"
)
def test_a_stored_lone_surrogate_does_not_break_the_pages_or_the_api(viewer_client, operator):
    bad = make_job()
    Job.objects.filter(id=bad.id).update(
        payload={"s": "\ud800"}, result={"r": "\udfff"}, errors=[{"error": "x\ud800"}]
    )
    other = make_job(payload={"fine": True})
    assert job_get(job_id=bad.id).payload == {"s": "\ufffd"}
    assert viewer_client.get(reverse("dashboard:job-detail", args=[bad.id])).status_code == 200
    assert viewer_client.get(reverse("dashboard:job-list")).status_code == 200
    api = APIClient()
    api.force_authenticate(operator)
    listing = api.get("/api/jobs/")
    assert listing.status_code == 200
    assert {row["id"] for row in listing.json()["results"]} == {bad.id, other.id}
    assert api.get(f"/api/jobs/{bad.id}/").json()["payload"] == {"s": "\ufffd"}


# --- the API ------------------------------------------------------------------------


@pytest.fixture
def api(operator) -> APIClient:
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(operator)
    return client


def _soon() -> str:
    return (timezone.now() + dt.timedelta(hours=1)).isoformat()


def _post_raw(api: APIClient, path: str, body: str | bytes):
    data = body.encode() if isinstance(body, str) else body
    return api.generic("POST", path, data, content_type="application/json")


def _job_body(payload_json: str, extra: str = "") -> str:
    return f'{{"handler": "{HANDLER}", "run_at": "{_soon()}", "payload": {payload_json}{extra}}}'


def _is_json_error(response, status: int) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    return response.json()


@pytest.mark.parametrize(
    ("payload_json", "message"),
    [
        (r'{"s": "\ud800"}', "payload contains a lone surrogate (\\ud800) at payload['s']"),
        (r'{"s": "\udfff and more"}', "payload contains a lone surrogate (\\udfff)"),
        (r'{"s\ud800": 1}', "in the key at payload"),
        (
            r'{"s": "a\u0000b"}',
            "payload must not contain the NUL character (\\u0000), found at payload['s']",
        ),
        (r'{"\u0000": 1}', "found in the key at payload"),
        ('{"n": 9007199254740993}', "payload has a number out of range at payload['n']"),
        ('{"n": 1e300}', "payload has a number out of range"),
    ],
)
def test_a_payload_that_cannot_be_stored_is_a_400_on_payload(api, payload_json, message):
    body = _is_json_error(_post_raw(api, "/api/jobs/", _job_body(payload_json)), 400)
    assert message in body["payload"][0]
    assert not Job.objects.exists()


def test_a_deep_payload_is_refused_by_the_field_and_a_deeper_body_by_the_parser(api):
    depth = tempo_settings().max_json_depth
    deep = "[" * (depth + 1) + "]" * (depth + 1)
    body = _is_json_error(_post_raw(api, "/api/jobs/", _job_body(deep)), 400)
    assert body["payload"][0].startswith(f"payload is nested deeper than {depth} levels")
    for levels in (depth + 5, 10_000, 200_000):
        deeper = "[" * levels + "]" * levels
        body = _is_json_error(_post_raw(api, "/api/jobs/", _job_body(deeper)), 400)
        assert body["detail"].startswith("the JSON body is nested deeper than")
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("policy_json", "message"),
    [
        ('{"delays": [1' + "0" * 400 + "]}", "the JSON body has an integer out of range (100000"),
        ('{"delays": [1e400]}', "the JSON body has a number out of range (1e400)"),
        ('{"delays": [NaN]}', "the JSON body has NaN, which is not JSON"),
        ('{"delays": [-Infinity]}', "the JSON body has -Infinity"),
    ],
)
def test_numbers_nothing_can_hold_are_a_400_from_the_parser(api, policy_json, message):
    response = _post_raw(api, "/api/jobs/", _job_body("{}", f', "retry_policy": {policy_json}'))
    assert _is_json_error(response, 400)["detail"].startswith(message)


def test_a_body_over_the_limit_is_413_naming_the_limit(api):
    limit = tempo_settings().max_payload_bytes + BODY_HEADROOM
    big = json.dumps({"s": "x" * (10 * 1024 * 1024)})
    body = _is_json_error(_post_raw(api, "/api/jobs/", _job_body(big)), 413)
    assert f"the limit is {limit} bytes (TEMPO_MAX_PAYLOAD_BYTES plus" in body["detail"]
    many = json.dumps(list(range(200_000)))
    assert _post_raw(api, "/api/jobs/", _job_body(many)).status_code == 413
    assert not Job.objects.exists()


def test_a_payload_over_its_limit_within_the_body_limit_is_a_400_on_payload(api):
    over = json.dumps({"s": "x" * tempo_settings().max_payload_bytes})
    body = _is_json_error(_post_raw(api, "/api/jobs/", _job_body(over)), 400)
    assert body["payload"][0].startswith("payload is 1048585 bytes encoded as JSON; the limit")
    assert "TEMPO_MAX_PAYLOAD_BYTES" in body["payload"][0]


def test_a_body_that_is_not_utf8_or_not_json_is_a_400(api):
    assert (
        "not valid utf-8"
        in _is_json_error(_post_raw(api, "/api/jobs/", b'{"a": "\xff"}'), 400)["detail"]
    )
    assert _is_json_error(_post_raw(api, "/api/jobs/", "{"), 400)["detail"].startswith(
        "JSON parse error"
    )


@pytest.mark.parametrize(
    ("field", "value_json"),
    [
        ("has", r'{"user_id": "\ud800"}'),
        ("has", r'{"a\u0000": 1}'),
        ("wants", r'["fr\u0000iends"]'),
        ("wants", r'["\udc00"]'),
        ("task_retry_policy", r'{"d\ud800": 1}'),
    ],
)
def test_graph_job_fields_that_cannot_be_stored_are_a_400(api, field, value_json):
    values = {"has": "{}", "wants": '["friends"]', field: value_json}
    body = "{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}"
    errors = _is_json_error(_post_raw(api, "/api/graph-jobs/", body), 400)
    assert field in errors


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/members/", r'{"external_id": "m\u0000"}'),
        ("/api/members/", r'{"external_id": "m\ud800"}'),
        ("/api/jobs/", r'{"handler": "a.b", "run_at": "x", "delivery": "\ud800"}'),
        ("/api/jobs/", r'{"handler": "a.b\ud800", "run_at": "x", "idempotency_key": "\u0000"}'),
        ("/api/recurring-tasks/", r'{"name": "n\ud800", "handler": "a.b", "period_seconds": 1}'),
    ],
)
def test_text_fields_with_nul_or_a_lone_surrogate_are_a_400_that_can_be_encoded(api, path, body):
    response = _post_raw(api, path, body)
    _is_json_error(response, 400)
    response.content.decode("utf-8")


def test_a_recurring_task_with_a_bad_payload_is_refused(api):
    body = (
        '{"name": "n", "handler": "' + HANDLER + '", "period_seconds": 3600, '
        r'"payload": {"s": "\ud800"}}'
    )
    errors = _is_json_error(_post_raw(api, "/api/recurring-tasks/", body), 400)
    assert "lone surrogate" in errors["payload"][0]


@pytest.mark.parametrize(
    "query",
    [
        {"limit": "500"},
        {"limit": "201"},
        {"limit": "0"},
        {"limit": "²"},
        {"member": "\x00"},
        {"handler": "a\x00"},
        {"cursor": "\x00"},
        {"cursor": "OTk5OS0xMi0zMVQyMzo1OTo1OS0yMzowMHwx"},  # 9999-12-31T23:59:59-23:00|1
        {"cursor": "x" * 5000},
        {"task": "9999999999999999999999"},
        {"run_at_from": "9999-12-31T23:59:59-23:00"},
        {"run_at_from": "0001-01-01T00:00:00+05:00"},
        {"state": "'; drop table"},
    ],
)
def test_bad_list_queries_are_a_400(api, query):
    _is_json_error(api.get("/api/jobs/", query), 400)


def test_list_limit_is_capped_at_200(api):
    assert MAX_PAGE_SIZE == api_serializers.MAX_PAGE == 200
    assert api.get("/api/jobs/", {"limit": "200"}).status_code == 200
    body = _is_json_error(api.get("/api/jobs/", {"limit": "500"}), 400)
    assert body["limit"] == ["Ensure this value is less than or equal to 200."]
    assert _is_json_error(api.get("/api/members/", {"limit": "500"}), 400)["limit"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("get", "/api/jobs/99999999999999999999999/", 404),
        ("get", "/api/jobs/424242/", 404),
        ("delete", "/api/jobs/", 405),
        ("put", "/api/members/", 405),
    ],
)
def test_errors_of_the_framework_are_json(api, method, path, status):
    _is_json_error(getattr(api, method)(path), status)


def test_an_unexpected_error_is_a_json_500_that_tells_nothing(api, monkeypatch, caplog):
    def broken(**kwargs):
        raise RuntimeError("secret detail")

    monkeypatch.setattr("tasksapp.web.api.views.job_page", broken)
    body = _is_json_error(api.get("/api/jobs/"), 500)
    assert "secret" not in json.dumps(body)
    assert body["detail"].startswith("internal error")
    assert "secret detail" in caplog.text  # logged, with its traceback


def test_a_wrong_content_type_is_a_json_415(api):
    response = api.generic("POST", "/api/jobs/", b"a=b", content_type="text/plain")
    _is_json_error(response, 415)


# --- list answers stay small ----------------------------------------------------------


def test_large_json_is_left_out_of_list_pages_and_kept_in_the_job(api):
    big = {"s": "x" * 100_000}
    large = make_job(payload=big, result=big)
    small = make_job(payload={"n": 1}, result={"ok": True})
    page = job_page(filters=JobFilters(), columns=None, json_inline_chars=16_384)
    by_id = {job.id: job for job in page.jobs}
    assert by_id[large.id].payload is None and by_id[large.id].omitted_json == (
        "payload",
        "result",
    )
    assert by_id[small.id].payload == {"n": 1} and by_id[small.id].omitted_json == ()
    rows = api_serializers.JobListItemSerializer(page.jobs, many=True).data
    row = {r["id"]: r for r in rows}
    assert row[large.id]["payload"] is None and row[large.id]["omitted"] == ["payload", "result"]
    assert row[small.id]["result"] == {"ok": True} and row[small.id]["omitted"] == []
    # A job loaded in full is measured by the serializer itself.
    full = api_serializers.JobListItemSerializer([Job.objects.get(id=large.id)], many=True).data
    assert full[0]["payload"] is None and full[0]["omitted"] == ["payload", "result"]
    assert api.get(f"/api/jobs/{large.id}/").json()["payload"] == big


def test_a_job_list_answer_of_two_huge_jobs_is_not_megabytes(api):
    """The reported case: two jobs of 100,000-item lists, ?limit=500 — now 400, and at the
    most rows (200) the answer leaves both payloads out."""
    big = {"items": list(range(100_000))}
    jobs = [make_job(payload=big), make_job(payload=big)]
    assert api.get("/api/jobs/", {"limit": "500"}).status_code == 400
    response = api.get("/api/jobs/", {"limit": "200"})
    assert response.status_code == 200
    assert len(response.content) < 10_000
    rows = response.json()["results"]
    assert {row["id"] for row in rows} == {job.id for job in jobs}
    assert all(row["payload"] is None and row["omitted"] == ["payload"] for row in rows)
