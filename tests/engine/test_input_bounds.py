"""Text a text column cannot store (NUL, lone surrogates) in keys, names and reasons, and
time limits past a day: refused by the services with a clear error, nothing stored."""

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.engine import options
from tasksapp.engine.jsonvalues import ERR_TEXT, JsonValueError, checked_text
from tasksapp.engine.models import Job, RoutingMode
from tasksapp.engine.options import JobOptions, JobOptionsError
from tasksapp.engine.queues import routing_degrade
from tasksapp.engine.services import JobInputError, job_schedule
from tasksapp.recurring.models import RecurringTask
from tasksapp.recurring.services import PlanningInputError, recurring_task_create

pytestmark = pytest.mark.django_db

HANDLER = "tests.handlers.recording.record"
UNSTORABLE = ["a\x00b", "\x00", "x\ud800", "\udfff", "\ud83d\ude00"]  # the last: a pair unjoined


def soon() -> dt.datetime:
    return timezone.now() + dt.timedelta(minutes=5)


@pytest.mark.parametrize("text", UNSTORABLE)
def test_checked_text_refuses_what_postgresql_cannot_store(text):
    with pytest.raises(JsonValueError) as caught:
        checked_text(text, what="name")
    assert str(caught.value) == ERR_TEXT.format(what="name")


@pytest.mark.parametrize("text", ["", "plain", "\U0001f600 émoji", "tab\tand\nnewline"])
def test_checked_text_keeps_storable_text(text):
    assert checked_text(text, what="name") == text


@pytest.mark.parametrize("field", ["idempotency_key", "concurrency_key"])
@pytest.mark.parametrize("text", UNSTORABLE)
def test_schedule_refuses_an_unstorable_key(field, text):
    with pytest.raises(JobInputError) as caught:
        job_schedule(handler=HANDLER, run_at=soon(), **{field: text})
    assert str(caught.value) == ERR_TEXT.format(what=field)
    assert not Job.objects.exists()


@pytest.mark.parametrize("field", ["name", "concurrency_key"])
@pytest.mark.parametrize("text", ["bad\x00name", "bad\ud800name"])
def test_recurring_task_refuses_an_unstorable_name_or_key(field, text):
    fields = {"name": "sync", "handler": HANDLER, "period": dt.timedelta(days=1), field: text}
    with pytest.raises(PlanningInputError) as caught:
        recurring_task_create(**fields)
    assert str(caught.value) == ERR_TEXT.format(what=field)
    assert not RecurringTask.objects.exists()


@pytest.mark.parametrize("reason", ["disk\x00full", "disk\udc80full"])
def test_degrade_refuses_an_unstorable_reason(reason):
    with pytest.raises(JobInputError) as caught:
        routing_degrade(reason=reason)
    assert str(caught.value) == ERR_TEXT.format(what="reason")
    mode = RoutingMode.objects.filter(id=1).first()
    assert mode is None or not mode.degraded


def test_degrade_keeps_a_plain_reason():
    assert routing_degrade(reason="database failover").reason == "database failover"


@pytest.mark.parametrize("limit", [86_400.001, 86_401, 7 * 86_400, 10**9, 1e300])
def test_time_limit_is_at_most_one_day(limit):
    with pytest.raises(JobOptionsError) as caught:
        JobOptions.validated(time_limit=limit)
    assert (caught.value.field, str(caught.value)) == ("time_limit", options.ERR_TIME_LIMIT)
    with pytest.raises(JobInputError) as caught:
        job_schedule(handler=HANDLER, run_at=soon(), time_limit=limit)
    assert str(caught.value) == options.ERR_TIME_LIMIT
    assert not Job.objects.exists()


@pytest.mark.parametrize("limit", [0.001, 30, 86_400, 86_400.0])
def test_time_limit_up_to_one_day_is_kept(limit):
    job = job_schedule(handler=HANDLER, run_at=soon(), time_limit=limit)
    job.refresh_from_db()
    assert job.time_limit == limit


def test_recurring_task_refuses_a_time_limit_past_one_day():
    with pytest.raises(PlanningInputError) as caught:
        recurring_task_create(
            name="weekly", handler=HANDLER, period=dt.timedelta(days=30), time_limit=2 * 86_400
        )
    assert str(caught.value) == options.ERR_TIME_LIMIT
    assert not RecurringTask.objects.exists()
