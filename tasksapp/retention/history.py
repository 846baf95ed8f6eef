"""Finished jobs over time, read from the rollups and — for the few minutes not rolled
up yet — from the jobs table by the same aggregate, so a chart reaches back as far as
the rollups (90 days and more) while only a week of rows exists."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from tasksapp.engine.models import JobState
from tasksapp.retention.models import LAG_BOUNDS_MS, LAG_FIELDS, JobRollup
from tasksapp.retention.services import rollup_mark
from tasksapp.retention.store import SUMS, RollupRow, bucket_start, retention_store

FAILED = (JobState.FAILED, JobState.DEAD, JobState.LOST)  # as the overview counts failures


@dataclass
class HistoryBucket:
    """Jobs that finished within one bucket (a minute, an hour or a day)."""

    start: dt.datetime
    jobs: dict[str, int] = field(default_factory=dict)  # by state
    attempts: int = 0
    failures: int = 0  # failed attempts
    retried: int = 0
    lag_count: int = 0
    lag_sum_ms: float = 0.0
    lags: list[int] = field(default_factory=lambda: [0] * len(LAG_FIELDS))

    @property
    def succeeded(self) -> int:
        return self.jobs.get(JobState.SUCCEEDED, 0)

    @property
    def failed(self) -> int:
        return sum(self.jobs.get(state, 0) for state in FAILED)

    def lag_percentile(self, q: float) -> float | None:
        return lag_percentile(self.lags, q)

    def add(self, row: RollupRow) -> None:
        self.jobs[row.state] = self.jobs.get(row.state, 0) + row.jobs
        self.attempts += row.attempts
        self.failures += row.failures
        self.retried += row.retried
        self.lag_count += row.lag_count
        self.lag_sum_ms += row.lag_sum_ms
        self.lags = [a + b for a, b in zip(self.lags, row.lags, strict=True)]


def lag_percentile(lags: list[int] | tuple[int, ...], q: float) -> float | None:
    """The q-quantile (ms) of a lag histogram, interpolated linearly within its bucket as
    Prometheus' histogram_quantile does; past the last bound, that bound."""
    total = sum(lags)
    if not total:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(lags):
        if count and seen + count >= rank:
            if index == len(LAG_BOUNDS_MS):
                return float(LAG_BOUNDS_MS[-1])
            low = LAG_BOUNDS_MS[index - 1] if index else 0.0
            return low + (LAG_BOUNDS_MS[index] - low) * (rank - seen) / count
        seen += count
    return float(LAG_BOUNDS_MS[-1])


def job_history(
    *,
    since: dt.datetime,
    until: dt.datetime,
    span: int,
    width: int | None = None,
    task_id: int | None = None,
) -> list[HistoryBucket]:
    """Finished jobs from `since` to `until` in buckets of `width` seconds (default the
    span; a multiple of it, e.g. a day of hour rollups), of one recurring task if given.
    Every bucket is present, empty ones too."""
    width = width or span
    first = bucket_start(since, width)
    buckets: dict[dt.datetime, HistoryBucket] = {}
    moment = first
    while moment < until:
        buckets[moment] = HistoryBucket(moment)
        moment += dt.timedelta(seconds=width)
    for row in _rows(since=first, until=until, span=span, task_id=task_id):
        bucket = buckets.get(bucket_start(row.bucket, width))
        if bucket is not None:
            bucket.add(row)
    return list(buckets.values())


def _rows(*, since: dt.datetime, until: dt.datetime, span: int, task_id: int | None):
    mark = rollup_mark()
    rolled_until = min(mark, until) if mark is not None else since
    if rolled_until > since:
        stored = JobRollup.objects.filter(span=span, bucket__gte=since, bucket__lt=rolled_until)
        if task_id is not None:
            stored = stored.filter(task_id=task_id)
        for rollup in stored.iterator():
            yield _row_of(rollup)
    raw_since = max(since, rolled_until)
    if raw_since < until:
        for row in retention_store().aggregate(span=span, since=raw_since, until=until):
            if task_id is None or row.task_id == task_id:
                yield row


def _row_of(rollup: JobRollup) -> RollupRow:
    return RollupRow(
        rollup.bucket,
        rollup.handler,
        rollup.task_id,
        rollup.state,
        *(getattr(rollup, name) for name in SUMS),
        tuple(getattr(rollup, name) for name in LAG_FIELDS),
    )
