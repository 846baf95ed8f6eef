"""/metrics in Prometheus' text format, computed from the database at each scrape (the
same selectors as the dashboard): every dispatcher and worker is seen, wherever it runs.

Windowed values (the lag histogram, throughput, failures) cover the last
`WINDOW` and are gauges: a scrape shows the window, not a counter since start."""

from __future__ import annotations

import datetime as dt

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from rest_framework.decorators import api_view, permission_classes

from tasksapp.retention.selectors import table_sizes
from tasksapp.retention.services import rollup_mark
from tasksapp.web.api.permissions import ViewOrOperate
from tasksapp.web.selectors.dashboard import (
    dispatcher_cost_by_hour,
    dispatcher_list,
    job_lag_histogram,
    job_lag_stats,
    job_state_counts,
    job_throughput,
    jobs_finished_by_state,
    worker_list,
)
from tasksapp.web.selectors.health import health_read

WINDOW = dt.timedelta(minutes=5)


class TempoCollector:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def collect(self):
        yield from self._health()
        yield from self._jobs()
        yield from self._processes()
        yield from self._storage()

    def _health(self):
        health = health_read(now=self.now)
        yield GaugeMetricFamily(
            "tempo_healthy",
            "1 while work gets done; 0 when a queue's oldest due job waits past the stall "
            "limit or due work has no live dispatcher or worker (as GET /api/health/).",
            value=1 if health.healthy else 0,
        )
        due = GaugeMetricFamily(
            "tempo_queue_due_jobs", "Jobs due and not started, per queue.", labels=["queue"]
        )
        oldest = GaugeMetricFamily(
            "tempo_queue_oldest_due_seconds",
            "How long the oldest due job not started has waited, per queue (0: none).",
            labels=["queue"],
        )
        for queue in health.queues:
            due.add_metric([queue.queue], queue.due)
            oldest.add_metric([queue.queue], queue.oldest_due_seconds or 0.0)
        yield from (due, oldest)

    def _storage(self):
        mark = rollup_mark()
        yield GaugeMetricFamily(
            "tempo_rollup_lag_seconds",
            "How far behind the rollups are (retention runs every 5 minutes and rolls up "
            "what finished more than 5 minutes ago: above ~15 minutes it is not running).",
            value=(self.now - mark).total_seconds() if mark else float("nan"),
        )
        size = GaugeMetricFamily(
            "tempo_table_bytes",
            "Size of a growing table or of its indexes.",
            labels=["table", "part"],
        )
        dead = GaugeMetricFamily(
            "tempo_table_dead_rows", "Dead rows autovacuum has not removed yet.", labels=["table"]
        )
        for table in table_sizes():
            size.add_metric([table.table, "table"], table.table_bytes)
            size.add_metric([table.table, "indexes"], table.index_bytes)
            dead.add_metric([table.table], table.dead_rows or 0)
        yield from (size, dead)

    def _jobs(self):
        since = self.now - WINDOW
        states = GaugeMetricFamily(
            "tempo_jobs", "Jobs by state (estimated above 50,000 per state).", labels=["state"]
        )
        for count in job_state_counts():
            states.add_metric([count.state], count.count)
        yield states
        histogram = job_lag_histogram(since=since)
        lag = HistogramMetricFamily(
            "tempo_job_start_lag_seconds",
            "Start lag (started_at - run_at) of the jobs started in the last 5 minutes.",
        )
        buckets = [("+Inf" if b == float("inf") else repr(b), c) for b, c in histogram.buckets]
        lag.add_metric([], buckets, histogram.sum_seconds)
        yield lag
        throughput = job_throughput(since=since, until=self.now)
        yield GaugeMetricFamily(
            "tempo_jobs_succeeded_per_minute",
            "Jobs succeeded per minute, averaged over the last 5 minutes.",
            value=throughput.per_minute,
        )
        stats = job_lag_stats(since=since)
        yield GaugeMetricFamily(
            "tempo_job_failures_window",
            "Attempts that ended failed, dead or lost in the last 5 minutes.",
            value=stats.failures,
        )
        yield GaugeMetricFamily(
            "tempo_job_retries_window",
            "Second or later attempts started in the last 5 minutes.",
            value=stats.retries,
        )
        finished = GaugeMetricFamily(
            "tempo_jobs_finished_day",
            "Jobs finished since this hour yesterday, by final state (from the hourly "
            "rollups, which outlive the jobs).",
            labels=["state"],
        )
        for state, count in sorted(jobs_finished_by_state(now=self.now).items()):
            finished.add_metric([state], count)
        yield finished
        cost = dispatcher_cost_by_hour(since=self.now - dt.timedelta(hours=1))
        yield GaugeMetricFamily(
            "tempo_dispatcher_cost_score_hour",
            "The polling-scheduler practice exercise's cost score "
            "(polls x 100 + lost claims x 10 + single reads), last hour.",
            value=sum(c.cost for c in cost),
        )

    def _processes(self):
        up = GaugeMetricFamily(
            "tempo_process_up", "1 if the heartbeat is fresh.", labels=["kind", "name"]
        )
        age = GaugeMetricFamily(
            "tempo_process_heartbeat_age_seconds",
            "Seconds since the last heartbeat.",
            labels=["kind", "name"],
        )
        partitions = GaugeMetricFamily(
            "tempo_dispatcher_partitions", "Partitions a live dispatcher leads.", labels=["name"]
        )
        for row in [*dispatcher_list(now=self.now), *worker_list(now=self.now)]:
            up.add_metric([row.kind, row.name], 1 if row.alive else 0)
            age.add_metric([row.kind, row.name], row.heartbeat_age_s)
            if row.kind == "dispatcher":
                partitions.add_metric([row.name], len(row.partitions))
        yield from (up, age, partitions)


@api_view(["GET"])
@permission_classes([ViewOrOperate])
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format, for a viewer: scrape with `Authorization: Token <key>`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TempoCollector(timezone.now()))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
