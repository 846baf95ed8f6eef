"""The job store without PostgreSQL (the embedded SQLite mode): the same guarded
transitions through the ORM, each batch inside one transaction, with this machine's
clock for the database's (it runs on any database Django supports)."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.db.models import F, Q
from django.db.models.functions import Greatest, Mod
from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.engine.models import Delivery, Job, JobQueue, JobState, QueueStartRate
from tasksapp.engine.models.jobs import DUE_STATES, LEASED_STATES

from .base import (
    FREE_LOST_RUNS,
    LEASE_EXPIRED_KIND,
    LOST_RUN_KIND,
    InsertsBySource,
    OperatorTransitions,
)
from .rows import (
    Claim,
    DatabaseTime,
    DueJob,
    FailedAttempt,
    InsertedJob,
    JobTemplate,
    LimitedClaims,
    MemberSlice,
    NewJob,
    PlannedSlice,
    PollWindow,
    QueueLimits,
    Reaped,
    Renewed,
    StartedJob,
    from_ms,
    ms_exact,
    ms_whole,
)

INSERT_BATCH = 500
SQLITE_MAX_PARAMS = 900  # ids in one IN (...): below SQLite's default limit of 999


def _secs(seconds: float) -> dt.timedelta:
    return dt.timedelta(seconds=seconds)


def _in_partitions(partitions: int, owned: Sequence[int]) -> Q:
    if len(set(owned)) >= partitions:
        return Q()
    return Q(pk__in=Job.objects.alias(p=Mod("id", partitions)).filter(p__in=owned).values("id"))


def _error_entry(
    attempt: int, at: dt.datetime, error: str, kind: str, traceback: str | None = None
) -> dict[str, Any]:
    """One more entry of a job's `errors` (its traceback, when there is one)."""
    entry = {"attempt": attempt, "at": at.isoformat(), "error": error, "kind": kind}
    return entry if traceback is None else {**entry, "traceback": traceback}


def _runs_again_uncounted(job: Job) -> bool:
    """A transactional run lost with its worker committed nothing: it runs again, its
    attempt given back, up to FREE_LOST_RUNS times."""
    if job.delivery != Delivery.TRANSACTIONAL or job.cancel_requested_at:
        return False
    lost_runs = sum(1 for e in job.errors if isinstance(e, dict) and e.get("kind") == LOST_RUN_KIND)
    return lost_runs < FREE_LOST_RUNS


def _lost_state(job: Job) -> str:
    """Where a running job whose lease expired goes, per delivery mode and attempts."""
    if job.delivery == Delivery.AT_MOST_ONCE:
        return JobState.LOST
    if job.attempts >= job.max_attempts:
        return JobState.DEAD
    return JobState.FAILED


def _started(job: Job, clock: DatabaseTime) -> StartedJob:
    return StartedJob(
        id=job.id,
        token=job.lease_token,
        handler=job.handler,
        payload=job.payload,
        attempt=job.attempts,
        max_attempts=job.max_attempts,
        delivery=job.delivery,
        retry_policy=job.retry_policy,
        idempotency_key=job.idempotency_key,
        run_at=job.run_at,
        time_limit=job.time_limit,
        clock=clock,
        cancel_requested=job.cancel_requested_at is not None,
        queue=job.queue,
    )


class SqliteJobStore(InsertsBySource, OperatorTransitions):
    """The JobStore of the other databases (see tasksapp.engine.store.base for each)."""

    def configure_session(self, connection: Any) -> None:
        pass  # SQLite commits synchronously, and its writers are serialised

    def flush_commits(self) -> None:
        pass  # every commit is durable already

    def poll_due(self, window: PollWindow) -> list[DueJob]:
        horizon = timezone.now() + _secs(window.lookahead)
        owned = _in_partitions(window.partitions, window.owned)
        jobs = Job.objects.filter(owned, state__in=DUE_STATES)
        if window.after is not None:
            after_run_at, after_id = window.after
            jobs = jobs.filter(Q(run_at__gt=after_run_at) | Q(run_at=after_run_at, id__gt=after_id))
        due = jobs.filter(run_at__lt=horizon).order_by("run_at", "id")
        rows = due.values_list("id", "run_at", "priority", "queue", named=True)[: window.limit]
        return [
            DueJob(row.id, ms_whole(row.run_at), row.run_at, row.priority, row.queue)
            for row in rows
        ]

    def claim_due(self, *, ids: Sequence[int], owner: str, ttl: float, lead: float) -> list[Claim]:
        with tempo_atomic():
            now = timezone.now()
            due = Job.objects.filter(
                id__in=ids, state__in=DUE_STATES, run_at__lte=now + _secs(lead)
            )
            won = list(due.values_list("id", "lease_token", "run_at", "queue", named=True))
            Job.objects.filter(id__in=[row.id for row in won], state__in=DUE_STATES).update(
                state=JobState.CLAIMED,
                lease_token=F("lease_token") + 1,
                claimed_by=owner,
                claimed_at=now,
                attempts=F("attempts") + 1,  # given back if the attempt never begins
                lease_expires_at=now + _secs(ttl),
            )
        return [Claim(row.id, row.lease_token + 1, ms_exact(row.run_at), row.queue) for row in won]

    def lock_queue(self, queue: str) -> QueueLimits | None:
        # SQLite's transactions are immediate (one writer at a time): the lock is the
        # transaction the caller holds.
        row = JobQueue.objects.filter(name=queue).first()
        if row is None:
            return None
        tat = None if row.rate_tat is None else ms_exact(row.rate_tat)
        return QueueLimits(
            row.concurrency_limit,
            row.key_concurrency_limit,
            row.rate_limit,
            row.rate_period,
            tat,
            ms_exact(timezone.now()),
        )

    def claim_limited(
        self,
        *,
        queue: str,
        ids: Sequence[int],
        owner: str,
        ttl: float,
        lead: float,
        room: int,
        limits: QueueLimits,
    ) -> LimitedClaims:
        now = timezone.now()
        due = Job.objects.filter(
            id__in=ids, queue=queue, state__in=DUE_STATES, run_at__lte=now + _secs(lead)
        ).order_by("-priority", "run_at", "id")
        candidates = list(due.values_list("id", "concurrency_key", named=True))
        active = Job.objects.filter(queue=queue, state__in=LEASED_STATES)
        if limits.concurrency_limit is not None:
            room = min(room, max(0, limits.concurrency_limit - active.count()))
        busy = Counter(active.exclude(concurrency_key="").values_list("concurrency_key", flat=True))
        chosen = []
        for row in candidates:
            if len(chosen) >= room:
                break
            keyed = row.concurrency_key and limits.key_concurrency_limit is not None
            if keyed and busy[row.concurrency_key] >= limits.key_concurrency_limit:
                continue
            busy[row.concurrency_key] += 1
            chosen.append(row.id)
        claims = self.claim_due(ids=chosen, owner=owner, ttl=ttl, lead=lead) if chosen else []
        won = {claim.id for claim in claims}
        return LimitedClaims(claims=claims, held=[r.id for r in candidates if r.id not in won])

    def set_rate_tat(self, queue: str, tat_ms: float) -> None:
        JobQueue.objects.filter(name=queue).update(rate_tat=from_ms(tat_ms))

    def take_start(self, *, queue: str, interval: float, burst: int) -> float:
        # One writer at a time: the transaction is the row's lock.
        with tempo_atomic():
            now = timezone.now()
            row = QueueStartRate.objects.filter(queue=queue).first()
            tat = now if row is None else max(row.tat, now)
            QueueStartRate(queue=queue, tat=tat + _secs(interval)).save()  # update, or insert
        return max(0.0, (tat - now).total_seconds() - (burst - 1) * interval)

    def rate_limits(self) -> dict[str, tuple[int, float]]:
        limited = JobQueue.objects.filter(rate_limit__isnull=False)
        return {q.name: (q.rate_limit, q.rate_period) for q in limited}

    def expire_dead_workers(self, *, grace: float) -> list[str]:
        return []  # no session locks: a dead worker's jobs wait out their leases

    def expire_claims_of_dead_dispatchers(self) -> int:
        return 0  # one dispatcher, no session locks: its claims wait out their leases

    def expire_lost_claims(self, *, owner: str, waiting: Sequence[int], settle: float) -> int:
        return 0  # no worker liveness to hear of a death

    def reap_expired(
        self,
        *,
        partitions: int,
        owned: Sequence[int],
        error: str,
        lost_run_error: str = "",
        waiting: Sequence[int] = (),
        ttl: float = 0.0,
    ) -> Reaped:
        scope = Job.objects.filter(_in_partitions(partitions, owned), state__in=LEASED_STATES)
        with tempo_atomic():
            now = timezone.now()
            expired = scope.filter(lease_expires_at__lt=now)
            # No start is deferred here: an expired claim never began, and the attempt its
            # claim counted is given back.
            given_back = Greatest(F("attempts") - 1, 0)
            asked = expired.filter(state=JobState.CLAIMED, cancel_requested_at__isnull=False)
            count = asked.update(
                state=JobState.CANCELLED,
                finished_at=now,
                attempts=given_back,
                claimed_by="",
                lease_expires_at=None,
            )
            # Claims whose messages may still wait in the broker keep their claim.
            for chunk in _chunks(list(waiting), SQLITE_MAX_PARAMS):
                expired.filter(id__in=chunk, state=JobState.CLAIMED).update(
                    lease_expires_at=now + dt.timedelta(seconds=ttl)
                )
            expired_ids = list(expired.values_list("id", flat=True))
            count += expired.filter(state=JobState.CLAIMED).update(
                state=JobState.SCHEDULED, attempts=given_back, claimed_by="", lease_expires_at=None
            )
            for job in expired.filter(state=JobState.RUNNING):
                if _runs_again_uncounted(job):
                    count += self._run_lost_run_again(job, now, lost_run_error or error)
                else:
                    count += self._lose_running(job, now, error)
            due = Job.objects.filter(id__in=expired_ids, state__in=DUE_STATES).order_by("run_at")
            due_again = [
                [job_id, ms_whole(run_at), priority, queue]
                for job_id, run_at, priority, queue in due.values_list(
                    "id", "run_at", "priority", "queue"
                )
            ]
            upcoming = (
                scope.filter(lease_expires_at__gte=now)
                .order_by("lease_expires_at")
                .values_list("lease_expires_at", flat=True)
                .first()
            )
        return Reaped(count, ms_whole(upcoming) if upcoming else None, due_again)

    def _run_lost_run_again(self, job: Job, now: dt.datetime, error: str) -> int:
        entry = _error_entry(job.attempts, now, error, LOST_RUN_KIND)
        held = Job.objects.filter(id=job.id, state=JobState.RUNNING, lease_token=job.lease_token)
        return held.update(
            state=JobState.SCHEDULED,
            attempts=max(job.attempts - 1, 0),
            run_at=now,
            started_at=None,
            last_error=error,
            errors=[*job.errors, entry],
            claimed_by="",
            lease_expires_at=None,
        )

    def _lose_running(self, job: Job, now: dt.datetime, error: str) -> int:
        entry = _error_entry(job.attempts, now, error, LEASE_EXPIRED_KIND)
        held = Job.objects.filter(id=job.id, state=JobState.RUNNING, lease_token=job.lease_token)
        state = JobState.CANCELLED if job.cancel_requested_at else _lost_state(job)
        return held.update(
            state=state,
            # A retry is due now; a lost or dead job keeps the run time it had.
            run_at=now if state == JobState.FAILED else job.run_at,
            finished_at=now,
            last_error=error,
            errors=[*job.errors, entry],
            claimed_by="",
            lease_expires_at=None,
        )

    def start(
        self,
        *,
        claims: Sequence[tuple[int, int]],
        worker: str,
        ttl: float,
        lead: float,
        defer_starts: bool = False,
    ) -> list[StartedJob]:
        # No liveness locks here, so no deferred starts: every start is written now.
        started = []
        with tempo_atomic():
            now = timezone.now()
            for job_id, token in claims:
                claimed = Job.objects.filter(
                    id=job_id,
                    lease_token=token,
                    state=JobState.CLAIMED,
                    run_at__lte=now + _secs(lead),
                )
                run_at = claimed.values_list("run_at", flat=True).first()
                if run_at is None:
                    continue
                begins = max(run_at, now)
                if claimed.update(
                    state=JobState.RUNNING,
                    started_at=begins,
                    claimed_by=worker,
                    lease_expires_at=begins + _secs(ttl),
                ):
                    started.append(Job.objects.get(id=job_id))
        clock = self.database_time()
        return [_started(job, clock) for job in started]

    def start_held(
        self, *, began: Sequence[tuple[int, int, float | None]], worker: str, ttl: float
    ) -> Renewed:
        started, cancelled = 0, set()
        with tempo_atomic():
            now = timezone.now()
            for job_id, token, began_ms in began:
                claimed = Job.objects.filter(id=job_id, lease_token=token, state=JobState.CLAIMED)
                if not claimed.update(
                    state=JobState.RUNNING,
                    started_at=now if began_ms is None else from_ms(began_ms),
                    claimed_by=worker,
                    lease_expires_at=now + _secs(ttl),
                ):
                    continue
                started += 1
                if Job.objects.filter(id=job_id, cancel_requested_at__isnull=False).exists():
                    cancelled.add(job_id)
        return Renewed(started, frozenset(cancelled))

    def prune_held(self, *, worker: str) -> None:
        """Nothing to drop: without liveness locks no start is deferred, none recorded."""

    def succeed(
        self, *, outcomes: Sequence[tuple[int, int, Any, float | None]], worker: str = ""
    ) -> set[int]:
        done = set()
        with tempo_atomic():
            now = timezone.now()
            for job_id, token, result, began_ms in outcomes:
                began = {} if began_ms is None else {"started_at": from_ms(began_ms)}
                running = Job.objects.filter(id=job_id, lease_token=token, state=JobState.RUNNING)
                if running.update(
                    state=JobState.SUCCEEDED,
                    finished_at=now,
                    result=result,
                    lease_expires_at=None,
                    **began,
                ):
                    done.add(job_id)
        return done

    def fail(self, attempt: FailedAttempt) -> bool:
        running = Job.objects.filter(
            id=attempt.job_id, lease_token=attempt.token, state=JobState.RUNNING
        )
        retry_in, began_ms, error = attempt.retry_in, attempt.began_ms, attempt.error
        with tempo_atomic():
            job = running.first()
            if job is None:
                return False
            now = timezone.now()
            entry = _error_entry(job.attempts, now, error, attempt.kind, attempt.traceback)
            return bool(
                running.update(
                    state=attempt.state,
                    run_at=job.run_at if retry_in is None else now + _secs(retry_in),
                    started_at=job.started_at if began_ms is None else from_ms(began_ms),
                    finished_at=now,
                    last_error=error,
                    errors=[*job.errors, entry],
                    claimed_by="",
                    lease_expires_at=None,
                )
            )

    def renew(self, *, leases: Sequence[tuple[int, int]], ttl: float) -> Renewed:
        with tempo_atomic():
            until = timezone.now() + _secs(ttl)
            held = Q()
            for i, t in leases:
                held |= Q(id=i, lease_token=t)
            running = Job.objects.filter(held, state=JobState.RUNNING)
            rows = list(running.values_list("id", "cancel_requested_at"))
            running.update(lease_expires_at=until)
        return Renewed(len(rows), frozenset(i for i, asked in rows if asked is not None))

    def cancel_running(
        self, *, job_id: int, token: int, began_ms: float | None, reason: str | None = None
    ) -> bool:
        began = {} if began_ms is None else {"started_at": from_ms(began_ms)}
        running = Job.objects.filter(id=job_id, lease_token=token, state=JobState.RUNNING)
        now = timezone.now()
        if reason is not None:
            history = running.values_list("history", flat=True).first() or []
            entry = {"event": "cancelled", "at": now.isoformat(), "reason": reason}
            began["history"] = [*history, entry]
        return bool(
            running.update(
                state=JobState.CANCELLED,
                finished_at=now,
                claimed_by="",
                lease_expires_at=None,
                **began,
            )
        )

    def snooze(self, *, job_id: int, token: int, delay: float) -> bool:
        running = Job.objects.filter(id=job_id, lease_token=token, state=JobState.RUNNING)
        with tempo_atomic():
            job = running.first()
            if job is None:
                return False
            now = timezone.now()
            entry = {
                "event": "snoozed",
                "at": now.isoformat(),
                "attempt": job.attempts,
                "seconds": delay,
            }
            return bool(
                running.update(
                    state=JobState.SCHEDULED,
                    run_at=now + _secs(delay),
                    attempts=max(job.attempts - 1, 0),
                    claimed_by="",
                    started_at=None,
                    lease_expires_at=None,
                    history=[*(job.history or []), entry],
                )
            )

    def release(self, *, leases: Sequence[tuple[int, int]]) -> int:
        released = 0
        with tempo_atomic():
            for i, t in leases:
                running = Job.objects.filter(id=i, lease_token=t, state=JobState.RUNNING)
                job = running.first()
                if job is not None:
                    released += running.update(
                        state=JobState.SCHEDULED,
                        attempts=max(job.attempts - 1, 0),
                        claimed_by="",
                        started_at=None,
                        lease_expires_at=None,
                    )
        return released

    def database_time(self) -> DatabaseTime:
        now = time.monotonic()
        return DatabaseTime(time.time() * 1000, now, now)

    def _insert_rows(self, jobs: Sequence[NewJob]) -> list[InsertedJob]:
        keys = [job.idempotency_key for job in jobs]
        with tempo_atomic():
            taken = set(
                Job.objects.filter(idempotency_key__in=keys).values_list(
                    "idempotency_key", flat=True
                )
            )
            fresh: dict[str, Job] = {}  # a batch's repeated key: its first row, as on conflict
            for job in jobs:
                if job.idempotency_key not in taken:
                    fresh.setdefault(job.idempotency_key, Job(**vars(job)))
            created = Job.objects.bulk_create(fresh.values(), batch_size=INSERT_BATCH)
        return [InsertedJob(job.id, job.idempotency_key, job.created_at) for job in created]

    def _insert_slice(self, source: MemberSlice) -> PlannedSlice:
        template, prefix = source.template, source.key_prefix
        with tempo_atomic():
            taken = set(
                Job.objects.filter(idempotency_key__startswith=prefix).values_list(
                    "idempotency_key", flat=True
                )
            )
            jobs, missed = [], 0
            for member_id, run_at in source.members():
                key = f"{prefix}{member_id}"
                if run_at < source.not_before:
                    missed += 1
                elif key not in taken:
                    jobs.append(_member_job(template, member_id, run_at, key))
            Job.objects.bulk_create(jobs, batch_size=INSERT_BATCH)
        return PlannedSlice(planned=len(jobs), missed=missed)


def _member_job(template: JobTemplate, member_id: int, run_at: dt.datetime, key: str) -> Job:
    return Job(
        handler=template.handler,
        payload={**template.payload, "member_id": member_id},
        run_at=run_at,
        max_attempts=template.max_attempts,
        retry_policy=template.retry_policy,
        delivery=template.delivery,
        time_limit=template.time_limit,
        idempotency_key=key,
        queue=template.queue,
        priority=template.priority,
        concurrency_key=template.concurrency_key.replace("{member}", str(member_id)),
    )


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]
