"""The recurring store's grouped reads give the same answer on both backends (the ORM one
runs on any database, here PostgreSQL's), and its locks run."""

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

from tasksapp.recurring.models import Member
from tasksapp.recurring.schedule import slice_of
from tasksapp.recurring.store import PostgresRecurringStore, SqliteRecurringStore
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

HANDLER = "tests.handlers.recording.record"
PHASES = [0.0, 0.1, 0.24, 0.25, 0.5, 0.74, 0.99, 0.999]


def make_members() -> None:
    for n, phase in enumerate(PHASES):
        Member.objects.create(external_id=f"m{n}", ordinal=n, phase=phase, active=n != 2)


def test_members_per_slice_agree():
    make_members()
    expected: dict[int, int] = {}
    for n, phase in enumerate(PHASES):
        if n != 2:  # inactive
            expected[slice_of(phase, 4)] = expected.get(slice_of(phase, 4), 0) + 1
    assert PostgresRecurringStore().members_per_slice(4) == expected
    assert SqliteRecurringStore().members_per_slice(4) == expected


def test_job_load_agrees_and_ignores_other_handlers_and_times():
    start = timezone.now().replace(microsecond=0)
    width = dt.timedelta(minutes=10)
    for minutes in (0, 1, 9, 10, 35, 39, 40, -1):
        JobFactory(handler=HANDLER, run_at=start + dt.timedelta(minutes=minutes))
    JobFactory(handler="tests.handlers.recording.noop", run_at=start)
    load = dict(handler=HANDLER, start=start, width=width, buckets=4)
    expected = {0: 3, 1: 1, 3: 2}  # 40 and -1 minutes are outside the four buckets
    assert PostgresRecurringStore().job_load(**load) == expected
    assert SqliteRecurringStore().job_load(**load) == expected


def test_locks_run_inside_a_transaction():
    with transaction.atomic():
        PostgresRecurringStore().lock_ordinals()
        PostgresRecurringStore().lock_active_tasks_shared()
        SqliteRecurringStore().lock_ordinals()
        SqliteRecurringStore().lock_active_tasks_shared()
