"""The OpenAPI schema is served and valid, and the API, fuzzed from it (schemathesis),
never answers with a server error, for an operator (who may write) and a viewer."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from schedapp.wsgi import application
from tasksapp.recurring.services import member_create
from tests.web.dashboard.fixtures import api_client_for, make_job

SCHEMA_URL = "/api/schema/?format=json"


def test_schema_is_served_without_login(client, db):
    response = client.get(SCHEMA_URL)
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


@pytest.fixture
def api_schema(transactional_db, operator):
    """Loaded inside a test: the schema view and the fuzzed calls share the test database."""
    return schemathesis.openapi.from_wsgi(SCHEMA_URL, application)


@pytest.fixture
def operator_token(operator) -> str:
    client = api_client_for(operator)
    for i in range(3):  # something for the ids the fuzzer tries to find
        make_job()
        member_create(external_id=f"fuzz-{i}")
    return client._credentials["HTTP_AUTHORIZATION"]


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
