"""Many jobs in one call: a batch scheduled by one set-based insert, all or none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.models import Job
from tasksapp.engine.store import job_store
from tasksapp.engine.store.rows import InsertedJob, NewJob

from .jobs import IDENTITY_FIELDS, IdempotencyConflict, JobInputError, _new_job, _same_job, _stored

ERR_BATCH_TYPE = "jobs must be a list of jobs, each an object of job_schedule's arguments."
ERR_BATCH_SIZE = "jobs must hold 1 to {max} jobs (got {count})."
ERR_BATCH_ITEM = "jobs[{index}]: {message}"
ERR_BATCH_ITEM_TYPE = "a job must be an object of job_schedule's arguments."
ERR_BATCH_FIELDS = "unknown field(s) {names}: a job takes job_schedule's arguments."
ERR_BATCH_REQUIRED = "{name} is required."
ERR_BATCH_KEY = (
    "idempotency_key '{key}' is also the key of jobs[{earlier}]: each job of a batch needs its own."
)

MAX_BATCH_JOBS = 1000  # of one job_schedule_many: one insert statement, one transaction
# The arguments of one job of a batch: job_schedule's.
BATCH_FIELDS = frozenset({*IDENTITY_FIELDS, "run_at", "idempotency_key"})
REQUIRED_FIELDS = ("handler", "run_at")


class BatchJobError(JobInputError):
    """One job of a batch is bad (nothing of the batch was stored): its `index`, the
    message of its own error (`reason`), and for a key conflict the stored job's id."""

    def __init__(self, message: str, *, index: int, job_id: int | None = None) -> None:
        super().__init__(ERR_BATCH_ITEM.format(index=index, message=message))
        self.index, self.reason, self.job_id = index, message, job_id


def job_schedule_many(*, jobs: Sequence[Mapping[str, Any]]) -> list[tuple[Job, bool]]:
    """Schedule a batch of jobs, each a mapping of job_schedule's arguments, in one
    set-based insert: all of them or, when one is bad, none (BatchJobError names its
    index). Each comes back as job_schedule_or_get answers: (job, stored by this call);
    a key scheduled before with the same parameters gives that job back, with other
    parameters it is a conflict. Each job of a batch needs a key of its own."""
    if isinstance(jobs, str | bytes | Mapping) or not isinstance(jobs, Sequence):
        raise JobInputError(ERR_BATCH_TYPE)
    if not 1 <= len(jobs) <= MAX_BATCH_JOBS:
        raise JobInputError(ERR_BATCH_SIZE.format(max=MAX_BATCH_JOBS, count=len(jobs)))
    new = _new_jobs(jobs)
    with tempo_atomic():  # a conflict found after the insert takes it back
        inserted = {row.idempotency_key: row for row in job_store().insert_jobs(new)}
        taken = [job.idempotency_key for job in new if job.idempotency_key not in inserted]
        stored = Job.objects.in_bulk(taken, field_name="idempotency_key") if taken else {}
        return [
            _member(index, job, inserted.get(job.idempotency_key), stored)
            for index, job in enumerate(new)
        ]


def _new_jobs(jobs: Sequence[Mapping[str, Any]]) -> list[NewJob]:
    """Every job checked, in order; the first bad one raises BatchJobError."""
    new: list[NewJob] = []
    first_of_key: dict[str, int] = {}
    for index, spec in enumerate(jobs):
        try:
            job = _new_job(**_arguments(spec))
        except JobInputError as exc:
            raise BatchJobError(str(exc), index=index) from exc
        earlier = first_of_key.setdefault(job.idempotency_key, index)
        if earlier != index:
            message = ERR_BATCH_KEY.format(key=job.idempotency_key, earlier=earlier)
            raise BatchJobError(message, index=index)
        new.append(job)
    return new


def _arguments(spec: Any) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise JobInputError(ERR_BATCH_ITEM_TYPE)
    unknown = sorted(str(name) for name in spec if name not in BATCH_FIELDS)
    if unknown:
        raise JobInputError(ERR_BATCH_FIELDS.format(names=", ".join(unknown)))
    missing = [name for name in REQUIRED_FIELDS if name not in spec]
    if missing:
        raise JobInputError(ERR_BATCH_REQUIRED.format(name=missing[0]))
    return dict(spec)


def _member(
    index: int, job: NewJob, row: InsertedJob | None, stored: dict[str, Job]
) -> tuple[Job, bool]:
    if row is not None:
        return _stored(job, row), True
    try:
        return _same_job(job, stored[job.idempotency_key]), False
    except IdempotencyConflict as exc:
        raise BatchJobError(str(exc), index=index, job_id=exc.job_id) from exc
