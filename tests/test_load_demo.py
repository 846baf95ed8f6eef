"""The demo a fresh install shows: jobs, and calendar schedules to look at, loaded once."""

import pytest
from django.core.management import call_command

from tasksapp.engine.models import Job
from tasksapp.schedules.models import Schedule

pytestmark = pytest.mark.django_db


def test_the_demo_loads_jobs_and_two_schedules_once():
    call_command("load_demo", "--count", "10", "--seconds", "5")
    call_command("load_demo", "--count", "10", "--seconds", "5")  # again: nothing more
    assert Job.objects.filter(idempotency_key__startswith="demo:1:").count() == 10
    schedules = {s.name: s for s in Schedule.objects.all()}
    assert set(schedules) == {"demo: greet every 30 s", "demo: nightly greeting (Berlin)"}
    nightly = schedules["demo: nightly greeting (Berlin)"]
    assert nightly.timezone == "Europe/Berlin" and nightly.active
