"""Stored jobs whose handler is not registered are reported, never imported."""

from __future__ import annotations

import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tasksapp.engine.checks import check_stored_handlers
from tasksapp.engine.models import Job, JobState
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
GHOST = "tests.handlers.imported_on_lookup.run"


def stored_with(handler: str, state: str = JobState.SCHEDULED) -> Job:
    job = JobFactory()
    Job.objects.filter(id=job.id).update(handler=handler, state=state)
    return job


def test_no_warning_when_every_waiting_handler_is_registered():
    JobFactory()
    stored_with(GHOST, JobState.SUCCEEDED)  # finished: nothing will run it
    assert check_stored_handlers(databases=["default"]) == []


def test_waiting_jobs_with_an_unregistered_handler_are_reported():
    stored_with(GHOST)
    stored_with(GHOST, JobState.FAILED)
    (warning,) = check_stored_handlers(databases=["default"])
    assert warning.id == "tempo.W001"
    assert f"{GHOST} (2 jobs)" in warning.msg
    assert "tests.handlers.imported_on_lookup" not in sys.modules


def test_the_check_needs_the_database_flag():
    stored_with(GHOST)
    assert check_stored_handlers(databases=None) == []


def test_the_command_lists_handlers_and_fails_on_unregistered_ones(capsys):
    call_command("handlers")
    assert "tests.handlers.recording.record" in capsys.readouterr().out
    stored_with(GHOST)
    with pytest.raises(CommandError, match="1 waiting jobs name 1 unregistered handlers"):
        call_command("handlers")


def test_migrate_on_an_empty_database_passes_the_check(tmp_path):
    """`migrate` runs the database checks before it creates the jobs table."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}"}
    env["DJANGO_SECRET_KEY"] = "checks-test-" * 5
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
