"""Production settings: `check --deploy` is clean behind HTTPS, a weak or published
secret key stops every process outside DEBUG/embedded mode, and every page carries the
browser protections (CSP without inline code, nosniff, referrer policy, no framing)."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from schedapp.settings import secret_key_weakness

ROOT = Path(__file__).resolve().parents[2]
CSP = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "frame-ancestors": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    """manage.py in a fresh process, with production defaults: no DEBUG, not embedded,
    no security overrides from the caller's environment."""
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "TEMPO_BEHIND", "TEMPO_TRUST", "TEMPO_EMBEDDED"))
    }
    base["DJANGO_SETTINGS_MODULE"] = "schedapp.settings"
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_behind_https():
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_DEBUG="false",
        TEMPO_BEHIND_HTTPS="true",
        TEMPO_TRUST_PROXY_SSL_HEADER="true",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "System check identified no issues" in output
    assert "WARNING" not in output


def test_check_deploy_names_what_plain_http_leaves_off():
    """Without TEMPO_BEHIND_HTTPS (./bin/run on http://) the HTTPS settings are off, and
    the deploy check says so."""
    result = manage("check", "--deploy", DJANGO_SECRET_KEY=secrets.token_urlsafe(50))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert set(re.findall(r"security\.W\d+", output)) == {
        "security.W004",  # HSTS
        "security.W008",  # SSL redirect
        "security.W012",  # secure session cookie
        "security.W016",  # secure CSRF cookie
    }


@pytest.mark.parametrize(
    "key",
    ["replace-with-a-long-random-string", "test-only-secret", "a" * 60],
    ids=["placeholder", "short", "repetitive"],
)
def test_a_weak_secret_key_is_refused_outside_debug(key):
    result = manage("check", DJANGO_SECRET_KEY=key)
    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is too weak" in result.stderr
    assert "secrets.token_urlsafe(50)" in result.stderr  # says how to make one


def test_the_placeholder_key_is_allowed_in_embedded_mode():
    result = manage(
        "check", DJANGO_SECRET_KEY="replace-with-a-long-random-string", TEMPO_EMBEDDED="1"
    )
    assert result.returncode == 0, result.stderr


def test_secret_key_weakness():
    assert "placeholder" in secret_key_weakness("replace-with-a-long-random-string")
    assert "placeholder" in secret_key_weakness("django-insecure-" + secrets.token_urlsafe(50))
    assert "16 characters" in secret_key_weakness("test-only-secret")
    assert "distinct" in secret_key_weakness("ab" * 30)
    assert secret_key_weakness(secrets.token_urlsafe(50)) is None


def assert_protected(response):
    directives = dict(
        part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";")
    )
    assert directives == CSP
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"


def test_login_page_headers(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    assert_protected(response)


def test_dashboard_headers(client, db):
    admin = User.objects.create_superuser("root", password="root-password-1")
    client.force_login(admin)
    response = client.get("/")
    assert response.status_code == 200
    assert_protected(response)


PAGES = sorted((ROOT / "templates").rglob("*.html"))
INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I), "script"),
    (re.compile(r"<style\b", re.I), "style element"),
    (re.compile(r"\sstyle\s*=", re.I), "style attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "event handler attribute"),
    (re.compile(r"javascript:", re.I), "javascript: URL"),
]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_templates_have_no_inline_code(page):
    """The CSP allows scripts and styles from files only: none inline in a template."""
    text = page.read_text()
    found = [what for pattern, what in INLINE if pattern.search(text)]
    assert not found, f"{page.relative_to(ROOT)}: {', '.join(found)} (blocked by the CSP)"
