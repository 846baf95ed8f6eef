"""manage.py on the data of ./bin/run: bin/manage runs it through bin/_embedded, the
environment bin/run starts runall in (here with this interpreter, as bin/manage does with
.venv's once _venv.sh has checked it), so commands need no DJANGO_SECRET_KEY and reach
the same SQLite file; plain manage.py without a key says where to go. And the admin
password runall generates is kept in the data folder, readable by its owner only."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from tasksapp.management.commands import runall

BASE_DIR = Path(__file__).resolve().parent.parent
EMBEDDED = BASE_DIR / "bin" / "_embedded"
# Nothing of the test run's own configuration reaches the commands.
CLEARED = ("DJANGO_SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "TEMPO_EMBEDDED")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED and k != "DJANGO_DEBUG"}
    return {**env, **extra}


def embedded_manage(data_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(EMBEDDED), sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=clean_env(TEMPO_DATA_DIR=str(data_dir)),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        start_new_session=True,  # no terminal: getpass reads the piped input
    )


def test_changepassword_works_on_the_embedded_data_without_a_secret_key(tmp_path):
    data = tmp_path / "data"
    assert embedded_manage(data, "migrate", "-v0").returncode == 0
    assert (data / "tempo.sqlite3").exists()  # the file ./bin/run uses, under its data dir
    create = (
        "from django.contrib.auth.models import User;"
        " User.objects.create_superuser('admin', '', 'old-pass-9876')"
    )
    assert embedded_manage(data, "shell", "-v", "0", "-c", create).returncode == 0

    changed = embedded_manage(data, "changepassword", "admin", stdin="n3w-Pass-4321\n" * 2)
    assert changed.returncode == 0, changed.stderr
    assert "Password changed successfully for user 'admin'" in changed.stdout

    check = (
        "from django.contrib.auth.models import User; u = User.objects.get(username='admin');"
        " print(u.check_password('n3w-Pass-4321'), u.check_password('old-pass-9876'))"
    )
    assert embedded_manage(data, "shell", "-v", "0", "-c", check).stdout.split() == [
        "True",
        "False",
    ]


def test_plain_manage_py_without_a_key_points_to_bin_manage(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=BASE_DIR,
        env=clean_env(TEMPO_DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert (
        "ImproperlyConfigured: Set the DJANGO_SECRET_KEY environment variable. On the data of"
        " ./bin/run (the embedded set-up), run manage.py commands as ./bin/manage <command>."
    ) in result.stderr


@pytest.mark.django_db
def test_a_generated_admin_password_is_printed_and_kept_for_its_owner_only(tmp_path, settings):
    settings.DATA_DIR = tmp_path
    kept = tmp_path / runall.PASSWORD_FILE
    kept.write_text("stale\n")
    kept.chmod(0o644)  # left by someone else: rewritten, and no longer readable by others
    command = runall.Command()

    login = command._ensure_admin()

    password = kept.read_text().strip()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert password != "stale" and len(password) >= 16
    assert get_user_model().objects.get(username="admin").check_password(password)
    assert login == f"user admin, password {password}  (generated; kept in {kept})"
    again = command._ensure_admin()  # the next start says where, not the password
    assert again == (
        f"user admin, password as generated in {kept} (change it: ./bin/manage changepassword"
        " admin)"
    )


@pytest.mark.django_db
def test_a_given_admin_password_is_not_written_anywhere(tmp_path, settings, monkeypatch):
    settings.DATA_DIR = tmp_path
    monkeypatch.setenv("TEMPO_ADMIN_PASSWORD", "given-pass-5555")
    login = runall.Command()._ensure_admin()
    assert login == "user admin, password from TEMPO_ADMIN_PASSWORD"
    assert not (tmp_path / runall.PASSWORD_FILE).exists()
