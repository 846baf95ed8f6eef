"""Login lockout (django-axes): after TEMPO_LOGIN_FAILURE_LIMIT failures one user name
from one address is locked for the cool-off, even with the right password; other users
and other addresses are not, and the lock ends by itself."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from schedapp.security import client_ip

LOGIN = "/login/"
RIGHT = {"username": "vera", "password": "vera-password-1"}
WRONG = {"username": "vera", "password": "nope"}


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = dt.timedelta(minutes=15)


def fail(client: Client, times: int, path: str = LOGIN, **extra):
    return [client.post(path, WRONG, **extra).status_code for _ in range(times)]


def test_after_the_limit_the_right_password_is_refused(client, viewer):
    assert fail(client, 2) == [200, 200]  # the login form again, with its error
    locked = client.post(LOGIN, WRONG)
    assert locked.status_code == 429
    response = client.post(LOGIN, RIGHT)
    assert response.status_code == 429
    page = response.content.decode()
    assert "Too many failed logins" in page and "Try again in 15 minutes" in page
    assert response["Retry-After"] == str(15 * 60)
    assert "<script" not in page
    assert client.get(reverse("dashboard:overview")).status_code == 302  # not logged in


def test_the_lock_ends_after_the_cool_off(client, viewer):
    fail(client, 3)
    assert client.post(LOGIN, RIGHT).status_code == 429
    with time_machine.travel(timezone.now() + dt.timedelta(minutes=16)):
        response = client.post(LOGIN, RIGHT)
        assert response.status_code == 302 and response["Location"] == "/"
        assert client.get("/").status_code == 200


def test_the_lock_is_per_user_name_and_address(client, viewer, operator):
    fail(client, 3)
    # Another user from the same address.
    other_user = client.post(LOGIN, {"username": "otto", "password": "otto-password-1"})
    assert other_user.status_code == 302
    # The same user from another address.
    elsewhere = Client(REMOTE_ADDR="10.1.2.3")
    assert elsewhere.post(LOGIN, RIGHT).status_code == 302


def test_a_success_before_the_limit_forgets_the_failures(client, viewer):
    fail(client, 2)
    assert client.post(LOGIN, RIGHT).status_code == 302
    client.post(reverse("dashboard:logout"))
    assert fail(client, 2) == [200, 200]
    assert client.post(LOGIN, RIGHT).status_code == 302


def test_the_admin_login_is_locked_too(client, db):
    User.objects.create_superuser("root", password="root-password-1")
    admin_login = reverse("admin:login")
    wrong = {"username": "root", "password": "nope", "next": "/admin/"}
    assert [client.post(admin_login, wrong).status_code for _ in range(3)] == [200, 200, 429]
    right = {"username": "root", "password": "root-password-1", "next": "/admin/"}
    assert client.post(admin_login, right).status_code == 429


def test_behind_a_proxy_the_forwarded_address_counts(client, viewer, settings):
    settings.TEMPO_PROXY_COUNT = 1
    # Every request comes from the proxy; X-Forwarded-For's last entry is the client's.
    fail(client, 3, HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert client.post(LOGIN, RIGHT, HTTP_X_FORWARDED_FOR="203.0.113.7").status_code == 429
    # A forged first entry does not change the address the proxy saw.
    forged = "198.51.100.1, 203.0.113.7"
    assert client.post(LOGIN, RIGHT, HTTP_X_FORWARDED_FOR=forged).status_code == 429
    assert client.post(LOGIN, RIGHT, HTTP_X_FORWARDED_FOR="203.0.113.8").status_code == 302


@pytest.mark.parametrize(
    ("count", "forwarded", "expected"),
    [
        (0, "198.51.100.1", "127.0.0.9"),  # no trusted proxy: the header is the client's
        (1, "", "127.0.0.9"),
        (1, "198.51.100.1", "198.51.100.1"),
        (1, "10.0.0.1, 198.51.100.1", "198.51.100.1"),
        (2, "10.0.0.1, 198.51.100.1, 192.0.2.1", "198.51.100.1"),
        (3, "198.51.100.1", "198.51.100.1"),
    ],
)
def test_client_ip(settings, count, forwarded, expected):
    settings.TEMPO_PROXY_COUNT = count
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
    request = RequestFactory().get("/", REMOTE_ADDR="127.0.0.9", **extra)
    assert client_ip(request) == expected
