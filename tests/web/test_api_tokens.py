"""API tokens: stored hashed, checked on `Authorization: Token <key>`, created, listed
and revoked by operators for themselves (dashboard, admin, manage.py), the key shown once
and never recorded or logged."""

from __future__ import annotations

import hashlib
import importlib
import io
import logging
import types

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from tasksapp.web.models import ApiToken, OperatorAction
from tasksapp.web.tokens import KEY_PREFIX, PREFIX_LENGTH, api_token_issue
from tests.web.dashboard.fixtures import *  # noqa: F403

pytestmark = pytest.mark.django_db

JOBS = "/api/jobs/"
TOKENS = "/tokens/"


def _api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _everything_stored() -> str:
    """Every value of every token and audit row, as text."""
    rows = list(ApiToken.objects.values()) + list(OperatorAction.objects.values())
    return repr(rows)


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


# --- storage and authentication ---------------------------------------------------------


def test_only_the_digest_and_a_prefix_are_stored(viewer):
    token, key = api_token_issue(owner=viewer, name="scraper")
    assert key.startswith(KEY_PREFIX) and len(key) == len(KEY_PREFIX) + 43
    token.refresh_from_db()
    assert token.digest == hashlib.sha256(key.encode()).hexdigest()
    assert token.prefix == key[:PREFIX_LENGTH]
    assert key not in _everything_stored()
    assert key not in str(token)


def test_a_token_reads_the_api_as_its_user_and_its_use_is_stamped(viewer):
    token, key = api_token_issue(owner=viewer, name="scraper")
    assert token.last_used_at is None
    assert _api(key).get(JOBS).status_code == 200
    assert _api(key).get("/metrics").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert _api(key).post(f"{JOBS}1/cancel/").status_code == 403  # a viewer's token


@pytest.mark.parametrize(
    "header",
    ["Token nope", "Token ", "Token a b", "token tempo_x", f"Token {'x' * 300}"],
)
def test_bad_keys_are_401_naming_the_scheme(db, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(JOBS)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_revoked_tokens_and_inactive_users_are_refused(viewer):
    token, key = api_token_issue(owner=viewer, name="scraper")
    assert _api(key).get(JOBS).status_code == 200
    viewer.is_active = False
    viewer.save()
    assert _api(key).get(JOBS).status_code == 401
    viewer.is_active = True
    viewer.save()
    from tasksapp.web.operators import api_token_revoke_audited

    root = User.objects.create_superuser("root", password="root-password-1")
    api_token_revoke_audited(user=root, token_id=token.id, via="api")
    assert _api(key).get(JOBS).status_code == 401


def test_the_schema_names_the_token_scheme(viewer_api):
    schema = viewer_api.get("/api/schema/?format=json").json()
    scheme = schema["components"]["securitySchemes"]["tokenAuth"]
    assert scheme == {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": scheme["description"],
    }


# --- the dashboard page ----------------------------------------------------------------


def test_viewers_see_the_list_without_forms(viewer_client, operator):
    token, _ = api_token_issue(owner=operator, name="deploy bot")
    page = viewer_client.get(TOKENS)
    assert page.status_code == 200
    html = page.content.decode()
    assert "deploy bot" in html and f"{token.prefix}…" in html and "otto" in html
    assert 'id="token-create"' not in html and "Revoke" not in html
    assert token.digest not in html


def test_an_operator_creates_a_token_and_sees_its_key_once(operator_client, operator, logs):
    response = operator_client.post(
        reverse("dashboard:token-create"), {"name": "prometheus", "user": operator.username}
    )
    assert response.status_code == 200
    key = response.context["key"]
    assert key in response.content.decode()
    assert "no-store" in response["Cache-Control"]
    token = ApiToken.objects.get()
    assert (token.name, token.user, token.created_by) == ("prometheus", operator, operator)
    # Shown once: not on the list, not in the session, messages or cookies.
    page = operator_client.get(TOKENS).content.decode()
    assert token.prefix in page and key not in page
    assert key not in repr(dict(operator_client.session.items()))
    assert key not in str(operator_client.cookies)
    # Recorded without the key, logged nowhere.
    record = OperatorAction.objects.get()
    assert (record.action, record.target_type, record.target_id, record.via) == (
        "token_create",
        "api_token",
        str(token.id),
        "dashboard",
    )
    assert record.details == {"name": "prometheus", "owner": "otto", "prefix": token.prefix}
    assert key not in _everything_stored()
    assert _api(key).get(JOBS).status_code == 200
    assert all(key not in r.getMessage() for r in logs.records)
    assert key not in logs.text


@pytest.mark.parametrize("form", [{"name": "", "user": "vera"}, {"name": "x", "user": "nobody"}])
def test_a_bad_form_is_400_and_creates_nothing(operator_client, viewer, form):
    response = operator_client.post(reverse("dashboard:token-create"), form)
    assert response.status_code == 400
    assert 'id="token-errors"' in response.content.decode()
    assert not ApiToken.objects.exists() and not OperatorAction.objects.exists()


def test_only_a_superuser_mints_a_superusers_token(operator_client, roles):
    root = User.objects.create_superuser("root", password="root-password-1")
    response = operator_client.post(
        reverse("dashboard:token-create"), {"name": "x", "user": "root"}
    )
    assert response.status_code == 400
    assert not ApiToken.objects.exists()
    client = Client()
    client.force_login(root)
    response = client.post(reverse("dashboard:token-create"), {"name": "x", "user": "root"})
    assert response.status_code == 200 and ApiToken.objects.get().user == root


def test_an_operator_revokes_their_token(operator_client, operator):
    token, key = api_token_issue(owner=operator, name="scraper")
    url = reverse("dashboard:token-revoke", args=[token.id])
    response = operator_client.post(url, follow=True)
    assert "revoked: it no longer authenticates" in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert _api(key).get(JOBS).status_code == 401
    response = operator_client.post(url, follow=True)
    assert "is already revoked" in response.content.decode()
    assert list(OperatorAction.objects.values_list("action", "target_id")) == [
        ("token_revoke", str(token.id))
    ]
    assert "revoked" in operator_client.get(TOKENS).content.decode()


def test_the_pages_have_forms_with_csrf_and_no_inline_script(operator_client, operator):
    token, _ = api_token_issue(owner=operator, name="scraper")
    html = operator_client.get(TOKENS).content.decode()
    assert html.count("csrfmiddlewaretoken") >= 2  # create, revoke (and log out)
    created = operator_client.post(
        reverse("dashboard:token-create"), {"name": "again", "user": "otto"}
    ).content.decode()
    for page in (html, created):
        assert "<script>" not in page and "onclick" not in page and "style=" not in page


# --- the admin -------------------------------------------------------------------------


def _staff_client(user) -> Client:
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_lists_tokens_without_keys_and_cannot_add_them(operator, viewer):
    token, key = api_token_issue(owner=viewer, name="scraper")
    client = _staff_client(operator)
    page = client.get(reverse("admin:tasksapp_apitoken_changelist")).content.decode()
    assert "scraper" in page and token.prefix in page and token.digest not in page
    change = client.get(reverse("admin:tasksapp_apitoken_change", args=[token.id]))
    assert change.status_code == 200 and token.digest not in change.content.decode()
    assert client.get(reverse("admin:tasksapp_apitoken_add")).status_code == 403
    assert client.post(reverse("admin:tasksapp_apitoken_add"), {}).status_code == 403
    assert key not in page


def test_the_admin_revokes_for_operators_and_records_a_viewers_attempt(operator, viewer):
    token, key = api_token_issue(owner=operator, name="scraper")
    url = reverse("admin:tasksapp_apitoken_changelist")
    form = {"action": "revoke_tokens", "_selected_action": [token.id]}
    _staff_client(viewer).post(url, form)
    token.refresh_from_db()
    assert token.revoked_at is None
    _staff_client(operator).post(url, form)
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert list(OperatorAction.objects.order_by("id").values_list("action", "user", "via")) == [
        ("denied:token_revoke", viewer.id, "admin"),
        ("token_revoke", operator.id, "admin"),
    ]


# --- manage.py api_token_create ------------------------------------------------------------


def test_the_command_prints_the_key_once_and_records_the_creation(viewer):
    out, err = io.StringIO(), io.StringIO()
    call_command("api_token_create", "vera", "--name", "scraper", stdout=out, stderr=err)
    key = out.getvalue().strip()
    assert key.startswith(KEY_PREFIX) and key not in err.getvalue()
    assert _api(key).get(JOBS).status_code == 200
    record = OperatorAction.objects.get()
    assert (record.action, record.via, record.user) == ("token_create", "command", None)
    assert record.username.startswith("manage.py")
    assert key not in _everything_stored()


def test_the_command_refuses_unknown_users_and_empty_names(viewer):
    with pytest.raises(CommandError, match="no user 'ghost'"):
        call_command("api_token_create", "ghost", "--name", "x", stdout=io.StringIO())
    with pytest.raises(CommandError, match="give the token a name"):
        call_command("api_token_create", "vera", "--name", " ", stdout=io.StringIO())
    assert not ApiToken.objects.exists()


# --- migration 0011: DRF's plain tokens ------------------------------------------------


def test_drf_tokens_are_converted_and_their_plain_keys_deleted(viewer):
    migration = importlib.import_module("tasksapp.migrations.0011_api_tokens")
    old_key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token"
            " (key varchar(40) PRIMARY KEY, created timestamptz NOT NULL, user_id integer)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [old_key, viewer.id])
    migration.convert_drf_tokens(django_apps, types.SimpleNamespace(connection=connection))
    token = ApiToken.objects.get()
    assert (token.user, token.prefix, token.name) == (viewer, old_key[:8], "DRF token (converted)")
    assert _api(old_key).get(JOBS).status_code == 200  # programs keep their header
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0
