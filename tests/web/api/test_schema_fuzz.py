"""The OpenAPI schema is served to viewers and valid, and the API, fuzzed from it
(schemathesis), never answers with a server error, for an operator (who may write) and
a viewer (whose writes are refused)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from schedapp.wsgi import application
from tasksapp.recurring.services import member_create
from tests.web.dashboard.fixtures import api_client_for, make_job

SCHEMA_URL = "/api/schema/?format=json"


def test_schema_needs_a_viewer(client, stranger, viewer):
    assert client.get(SCHEMA_URL).status_code == 401
    assert api_client_for(stranger).get(SCHEMA_URL).status_code == 403
    client.force_login(viewer)  # the dashboard's session will do
    assert client.get(SCHEMA_URL).status_code == 200
    response = api_client_for(viewer).get(SCHEMA_URL)
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    paths = set(schema["paths"])
    assert {
        "/api/jobs/",
        "/api/jobs/{job_id}/",
        "/api/jobs/{job_id}/cancel/",
        "/api/jobs/{job_id}/retry/",
        "/api/jobs/{job_id}/run-now/",
        "/api/graph-jobs/",
        "/api/members/",
        "/api/members/{member_id}/deactivate/",
        "/api/recurring-tasks/",
        "/api/recurring-tasks/{task_id}/pause/",
    } <= paths
    assert "tokenAuth" in schema["components"]["securitySchemes"]


def _authorization(user) -> str:
    return api_client_for(user)._credentials["HTTP_AUTHORIZATION"]


@pytest.fixture
def api_schema(transactional_db, viewer):
    """Loaded inside a test: the schema view and the fuzzed calls share the test database."""
    headers = {"Authorization": _authorization(viewer)}
    return schemathesis.openapi.from_wsgi(SCHEMA_URL, application, headers=headers)


@pytest.fixture
def fuzz_data(transactional_db) -> None:
    for i in range(3):  # something for the ids the fuzzer tries to find
        make_job()
        member_create(external_id=f"fuzz-{i}")


@pytest.fixture
def operator_token(operator, fuzz_data) -> str:
    return _authorization(operator)


@pytest.fixture
def viewer_token(viewer, fuzz_data) -> str:
    return _authorization(viewer)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_never_answers_5xx(case, operator_token):
    response = case.call(headers={"Authorization": operator_token})
    case.validate_response(response, checks=[not_a_server_error])


# Fewer cases for a viewer: every write is refused before its input is read, so the
# writes' inputs matter less than the operator's.
@schema.parametrize()
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_never_answers_5xx_to_a_viewer(case, viewer_token):
    response = case.call(headers={"Authorization": viewer_token})
    case.validate_response(response, checks=[not_a_server_error])
    if case.method.upper() not in ("GET", "HEAD", "OPTIONS"):
        # Refused before anything runs; 404 when the path matches no URL (id "-1"); 405 on
        # the health endpoint, which anyone may read and nobody may write.
        refused = (403, 404, 405) if case.path == "/api/health/" else (403, 404)
        assert response.status_code in refused, (case.method, case.path, response.status_code)
