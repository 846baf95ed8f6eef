"""What each kind of rule reads from the database: the keys (a handler, a queue, a
dispatcher) for which its condition holds at `now`, each with a one-line summary.

Reads stay on the indexes the dashboard uses: the jobs read by finish or start time are
also bounded by run time (a job starts and finishes after its last attempt's run time),
LOOKBACK before the window at most."""

from __future__ import annotations

import datetime as dt

from django.db.models import Count, Min, Q

from tasksapp.alerts.models import AlertKind, AlertRule
from tasksapp.engine.db import tempo_connection
from tasksapp.engine.models import Dispatcher, Job, JobQueue, JobState, WorkerProcess
from tasksapp.engine.models.jobs import DUE_STATES
from tasksapp.engine.settings import DEFAULT_QUEUE

LIVE_SECONDS = 30.0  # a worker not heard from for this long serves nothing
LOOKBACK = dt.timedelta(days=1)  # the longest wait between a job's run time and its end

SUMMARY_DEAD = "{n} job(s) of {key} went dead in the last {window:.0f} s (threshold {limit:g})"
SUMMARY_OLDEST = "queue {key}: its oldest due job has waited {age:.0f} s (threshold {limit:g} s)"
SUMMARY_LAG = "queue {key}: start lag p95 {p95:.1f} s over {n} start(s) (threshold {limit:g} s)"
SUMMARY_NO_WORKER = (
    "queue {key}: {n} due job(s), the oldest waiting {age:.0f} s, and no live worker serving it"
)
SUMMARY_DISPATCHER = "dispatcher {key}: no heartbeat for {age:.0f} s and not stopped"

# Start lag's 95th percentile per queue, of the jobs started in [%(since)s, %(now)s].
SQL_START_LAG_P95 = """
SELECT queue,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at)),
       count(*)
  FROM tasksapp_job
 WHERE started_at >= %(since)s AND started_at <= %(now)s
   AND run_at >= %(run_since)s AND run_at <= %(now)s
   AND (%(queue)s = '' OR queue = %(queue)s)
   AND (%(handler)s = '' OR handler = %(handler)s)
 GROUP BY queue
"""


def firing_keys(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    """{key: summary} of what holds for `rule` at `now`."""
    return READERS[rule.kind](rule, now)


def dead_jobs(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    since = now - rule.window
    jobs = Job.objects.filter(
        state=JobState.DEAD,
        finished_at__gte=since,
        finished_at__lte=now,
        run_at__gte=since - LOOKBACK,
    )
    if rule.handler:
        jobs = jobs.filter(handler=rule.handler)
    rows = jobs.values("handler").annotate(n=Count("id")).order_by()
    window = rule.window.total_seconds()
    return {
        row["handler"]: SUMMARY_DEAD.format(
            n=row["n"], key=row["handler"], window=window, limit=rule.threshold
        )
        for row in rows
        if row["n"] >= rule.threshold
    }


def oldest_due(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    return {
        queue: SUMMARY_OLDEST.format(key=queue, age=age, limit=rule.threshold)
        for queue, (_, age) in _due_by_queue(rule, now).items()
        if age > rule.threshold
    }


def start_lag(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    since = now - rule.window
    params = {
        "since": since,
        "now": now,
        "run_since": since - LOOKBACK,
        "queue": rule.queue,
        "handler": rule.handler,
    }
    with tempo_connection().cursor() as cursor:
        cursor.execute(SQL_START_LAG_P95, params)
        rows = cursor.fetchall()
    return {
        queue: SUMMARY_LAG.format(key=queue, p95=p95, n=n, limit=rule.threshold)
        for queue, p95, n in rows
        if p95 is not None and p95 > rule.threshold
    }


def no_worker(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    served = _served_queues(now)
    return {
        queue: SUMMARY_NO_WORKER.format(key=queue, n=n, age=age)
        for queue, (n, age) in _due_by_queue(rule, now).items()
        if age > rule.threshold and queue not in served
    }


def dispatcher_gone(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    stale = Dispatcher.objects.filter(
        stopped_at__isnull=True, heartbeat_at__lt=now - dt.timedelta(seconds=rule.threshold)
    ).values_list("name", "heartbeat_at")
    return {
        name: SUMMARY_DISPATCHER.format(key=name, age=(now - beat).total_seconds())
        for name, beat in stale
    }


def _due_by_queue(rule: AlertRule, now: dt.datetime) -> dict[str, tuple[int, float]]:
    """{queue: (due jobs, the oldest one's wait in seconds)} of the queues not paused:
    jobs waiting to be claimed, or claimed and not started, whose run time has come."""
    jobs = Job.objects.filter(Q(state__in=DUE_STATES) | Q(state=JobState.CLAIMED), run_at__lte=now)
    if rule.queue:
        jobs = jobs.filter(queue=rule.queue)
    paused = JobQueue.objects.filter(paused=True).values_list("name", flat=True)
    rows = jobs.exclude(queue__in=list(paused)).values("queue")
    rows = rows.annotate(n=Count("id"), oldest=Min("run_at")).order_by()
    return {row["queue"]: (row["n"], (now - row["oldest"]).total_seconds()) for row in rows}


def _served_queues(now: dt.datetime) -> set[str]:
    live = WorkerProcess.objects.filter(heartbeat_at__gte=now - dt.timedelta(seconds=LIVE_SECONDS))
    return {
        queue
        for queues in live.values_list("queues", flat=True)
        for queue in queues or [DEFAULT_QUEUE]
    }


READERS = {
    AlertKind.DEAD_JOBS: dead_jobs,
    AlertKind.OLDEST_DUE: oldest_due,
    AlertKind.START_LAG: start_lag,
    AlertKind.NO_WORKER: no_worker,
    AlertKind.DISPATCHER_GONE: dispatcher_gone,
}
