"""Epochs near the calendar's ends: refused with a clear error when a task is created or
changed, and a task stored with one (before the bound existed) never stops the planner
from planning the other tasks."""

import datetime as dt
import logging

import pytest
import time_machine
from django.utils import timezone

from tasksapp.engine.models import Job
from tasksapp.recurring.models import RecurringTask, SlicePlan
from tasksapp.recurring.services import (
    PlanningInputError,
    member_create_many,
    plan_due_slices,
    recurring_task_create,
    recurring_task_update,
)
from tasksapp.recurring.services import recurring_tasks as task_svc
from tests.web.dashboard.fixtures import operator, operator_api, roles  # noqa: F401

# The API fixtures imported above are used as test arguments:
# ruff: noqa: F811

pytestmark = pytest.mark.django_db

HANDLER = "tests.handlers.recording.record"
DAY = dt.timedelta(days=1)
NOW = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
LAST_DAY = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)


def expected_range_error(now: dt.datetime) -> str:
    return task_svc.ERR_EPOCH_RANGE.format(
        earliest="1970-01-01T00:00:00+00:00",
        latest=(now + dt.timedelta(days=3653)).isoformat(timespec="seconds"),
        future_years=10,
    )


@pytest.fixture
def planning(settings):
    settings.TEMPO_PLANNING = {
        "PHASE_STRATEGY": "golden",
        "HORIZON_SECONDS": 26 * 3600.0,
        "LATE_GRACE_SECONDS": 900.0,
    }


@pytest.mark.parametrize(
    "epoch",
    [
        LAST_DAY,
        dt.datetime(9999, 12, 31, 23, tzinfo=dt.timezone(-dt.timedelta(hours=5))),
        NOW + dt.timedelta(days=3654),  # just past ten years ahead
        dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=dt.UTC),
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
    ],
)
def test_create_refuses_an_epoch_out_of_range(epoch):
    with time_machine.travel(NOW, tick=False), pytest.raises(PlanningInputError) as caught:
        recurring_task_create(name="far", handler=HANDLER, period=DAY, epoch=epoch)
    assert str(caught.value) == expected_range_error(NOW)
    assert not RecurringTask.objects.exists()


@pytest.mark.parametrize(
    "epoch",
    [dt.datetime(1970, 1, 1, tzinfo=dt.UTC), NOW - 300 * DAY, NOW + dt.timedelta(days=3653)],
)
def test_create_accepts_an_epoch_in_range(epoch):
    with time_machine.travel(NOW, tick=False):
        task = recurring_task_create(name="ok", handler=HANDLER, period=DAY, epoch=epoch)
    assert task.epoch == epoch


def test_update_refuses_an_epoch_out_of_range():
    with time_machine.travel(NOW, tick=False):
        task = recurring_task_create(name="sync", handler=HANDLER, period=DAY, epoch=NOW)
        with pytest.raises(PlanningInputError) as caught:
            recurring_task_update(task=task, epoch=LAST_DAY)
    assert str(caught.value) == expected_range_error(NOW)
    task.refresh_from_db()
    assert task.epoch == NOW


def test_api_answers_400_for_an_epoch_out_of_range(operator_api):
    body = {"name": "far", "handler": HANDLER, "period_seconds": 86400}
    body["epoch"] = "9999-12-31T00:00:00Z"
    response = operator_api.post("/api/recurring-tasks/", body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["epoch"][0].startswith("epoch must lie between 1970-01-01")
    assert not RecurringTask.objects.exists()


def test_a_task_stored_with_a_bad_epoch_does_not_stop_the_others(planning, caplog):
    """As one stored before the bound: the planner logs it, reports it, plans the rest."""
    member_create_many(external_ids=[f"u{n}" for n in range(20)])
    with time_machine.travel(NOW, tick=False):
        today = timezone.now().replace(hour=0)
        bad = recurring_task_create(name="bad", handler=HANDLER, period=DAY, epoch=today)
        good = recurring_task_create(name="good", handler=HANDLER, period=DAY, epoch=today)
        RecurringTask.objects.filter(pk=bad.pk).update(epoch=LAST_DAY)
        with caplog.at_level(logging.ERROR, logger="tasksapp.recurring.services.slices"):
            summary = plan_due_slices()
    assert summary.failed_tasks == ["bad"]
    assert summary.slices >= 1 and summary.jobs == Job.objects.count() > 0
    assert {job.payload["recurring_task_id"] for job in Job.objects.all()} == {good.id}
    assert SlicePlan.objects.filter(task=good).count() == summary.slices
    assert not SlicePlan.objects.filter(task=bad).exists()
    assert "planning task bad failed" in caplog.text
