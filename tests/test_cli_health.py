"""`manage.py tempo health`: exit status 0 when healthy, 1 when work stalls."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.utils import timezone

from tasksapp.engine.models import Dispatcher, WorkerProcess
from tests.web.dashboard.fixtures import make_job

pytestmark = pytest.mark.django_db


def _health(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("tempo", "health", *args, stdout=out, stderr=err)
    except SystemExit as exit:
        return int(exit.code), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def test_healthy_exits_0():
    status, out, _ = _health()
    assert status == 0
    assert out.splitlines()[-1] == "ok"


def test_a_stall_exits_1_and_says_why():
    Dispatcher.objects.create(name="d1", hostname="h", pid=1)
    WorkerProcess.objects.create(name="w1", hostname="h", pid=2, queues=["default"])
    make_job(run_at=timezone.now() - dt.timedelta(minutes=3))
    status, out, err = _health()
    assert status == 1
    assert "default: 1 due, oldest waiting 1" in out
    assert "queue default: its oldest due job has waited 1" in err
    status, out, _ = _health("--json")
    assert status == 1
    assert json.loads(out)["queues"][0]["due"] == 1
