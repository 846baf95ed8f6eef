"""A real `celery beat` with django-celery-beat's DatabaseScheduler: the planner entry
that migration 0004 installs runs in a worker and plans a recurring task's slices, whose
jobs a dispatcher and the worker then run."""

import datetime as dt
import sys
import time
from pathlib import Path

import pytest
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

from tasksapp.recurring.services import member_create_many, recurring_task_create
from tasksapp.recurring.tasks import PLAN_DUE_SLICES
from tests.processes.support import Cluster, PrivateRedis, effect_counts, wait_for

pytestmark = pytest.mark.processes

HANDLER = "tests.handlers.recording.record"
PLANNER_NAME = "tempo: plan due slices"  # as migration 0004 names it
BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"  # as compose and runall
PERIOD = dt.timedelta(minutes=10)
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def private_redis():
    server = PrivateRedis().start()
    yield server
    server.stop()


def planner_every_two_seconds() -> PeriodicTask:
    """The migration's entry (recreated if an earlier test emptied the tables), on a 2 s
    interval instead of daily."""
    every, _ = IntervalSchedule.objects.get_or_create(every=2, period=IntervalSchedule.SECONDS)
    entry, _ = PeriodicTask.objects.update_or_create(
        name=PLANNER_NAME,
        defaults={"task": PLAN_DUE_SLICES, "interval": every, "crontab": None, "enabled": True},
    )
    PeriodicTasks.update_changed()
    return entry


def test_a_real_beat_runs_the_planner_entry_and_its_jobs_run(db_url, sql, private_redis, tmp_path):
    members = member_create_many(external_ids=[f"m{n}" for n in range(6)])
    # Period 0 started almost a period ago: all six members' runs are due (within the
    # late grace); period 1 starts beyond the 30 s horizon.
    task = recurring_task_create(
        name="sync",
        handler=HANDLER,
        period=PERIOD,
        slices=2,
        epoch=timezone.now() - PERIOD + MINUTE,
    )
    planner_every_two_seconds()

    cluster = Cluster(
        database_url=db_url,
        broker_url=private_redis.url,
        queue="tempo",
        logs=tmp_path,
        TEMPO_PLANNING_HORIZON_SECONDS="30",
    )
    try:
        cluster.dispatcher("d1")
        cluster.worker("w1")  # on the Tempo queue only, as compose and runall start it
        celery = str(Path(sys.executable).with_name("celery"))
        cluster._start(
            "beat",
            [
                *(celery, "-A", "schedapp", "beat", "--loglevel=INFO"),
                *("--scheduler", BEAT_SCHEDULER),
                *("--pidfile", str(tmp_path / "beat.pid"), "-s", str(tmp_path / "beat")),
            ],
        )

        def planned_jobs() -> dict[int, str]:
            rows = sql.execute(
                "SELECT id, state FROM tasksapp_job WHERE payload->>'recurring_task_id' = %s",
                [str(task.id)],
            ).fetchall()
            return dict(rows)

        wait_for(
            lambda: len(planned_jobs()) == len(members)
            and set(planned_jobs().values()) == {"succeeded"},
            timeout=60,
            message=f"beat planned the slices and their jobs ran ({planned_jobs()})",
        )
        plans = sql.execute(
            "SELECT period, slice_index FROM tasksapp_sliceplan WHERE task_id = %s ORDER BY 1, 2",
            [task.id],
        ).fetchall()
        assert plans == [(0, 0), (0, 1)]
        member_ids = sql.execute(
            "SELECT (payload->>'member_id')::bigint FROM tasksapp_job"
            " WHERE payload->>'recurring_task_id' = %s",
            [str(task.id)],
        ).fetchall()
        assert sorted(row[0] for row in member_ids) == sorted(m.id for m in members)
        assert set(effect_counts(sql).values()) == {1}
        # Beat sends the entry every 2 s: planning again adds nothing.
        wait_for(
            lambda: cluster.log("beat").count(f"Sending due task {PLANNER_NAME}") >= 4,
            timeout=30,
            message="beat sent the planner entry four times",
        )
        time.sleep(1)
        assert len(planned_jobs()) == len(members) and len(plans) == 2
        assert (
            sql.execute(
                "SELECT count(*) FROM tasksapp_sliceplan WHERE task_id = %s", [task.id]
            ).fetchone()[0]
            == 2
        )
    finally:
        cluster.stop()
