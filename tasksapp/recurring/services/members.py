"""Members: a phase given once at creation, never changed; joining and leaving the
slices that are already planned."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.models.jobs import DUE_STATES
from tasksapp.engine.services import job_cancel_waiting, job_retry
from tasksapp.recurring import phases
from tasksapp.recurring.models import FreeOrdinal, Member, SlicePlan
from tasksapp.recurring.selectors.schedules import slice_plans_open, slice_plans_with_pending_jobs
from tasksapp.recurring.settings import planning_settings
from tasksapp.recurring.store import recurring_store

from .errors import PlanningInputError
from .slices import job_key_prefix, lock_active_tasks_shared, plan_members

ERR_EXTERNAL_ID = "external_id must be a non-empty string of at most 200 characters."
ERR_EXTERNAL_ID_TWICE = "external_ids lists {ids} more than once."
ERR_MEMBER_EXISTS = "a member with external_id {ids} already exists."


def member_create(*, external_id: str) -> Member:
    """Create one member; see member_create_many."""
    return member_create_many(external_ids=[external_id])[0]


def member_create_many(*, external_ids: Sequence[str]) -> list[Member]:
    """Create members, each with a phase given once by the configured strategy from its
    ordinal (the lowest ordinal freed by a deleted member first). Slices of active tasks
    already planned get the new members' jobs at once where their time is still ahead."""
    ids = _validated_external_ids(external_ids)
    strategy = _strategy()
    taken = list(Member.objects.filter(external_id__in=ids).values_list("external_id", flat=True))
    if taken:
        raise PlanningInputError(ERR_MEMBER_EXISTS.format(ids=", ".join(sorted(taken))))
    try:
        with transaction.atomic():
            ordinals = _take_ordinals(len(ids))
            members = Member.objects.bulk_create(
                Member(external_id=e, ordinal=o, phase=phases.phase_for(strategy, ordinal=o))
                for e, o in zip(ids, ordinals, strict=True)
            )
            _plan_into_open_slices(members)
    except IntegrityError as exc:  # created concurrently under the same external_id
        raise PlanningInputError(ERR_MEMBER_EXISTS.format(ids=", ".join(ids))) from exc
    return members


def member_activate(*, member: Member) -> Member:
    """Plan the member again in the slices already planned, where its time is still
    ahead: its cancelled jobs there are scheduled again, missing ones are created."""
    with transaction.atomic():
        if Member.objects.filter(pk=member.pk, active=False).update(active=True):
            member.active = True
            _plan_into_open_slices([member])
            _restore_cancelled_jobs(member)
    return member


def member_deactivate(*, member: Member) -> Member:
    """Stop planning the member and cancel its waiting jobs; its phase is kept."""
    with transaction.atomic():
        if Member.objects.filter(pk=member.pk, active=True).update(active=False):
            member.active = False
            _cancel_pending_jobs(member)
    return member


def member_delete(*, member: Member) -> int:
    """Delete the member, cancel its waiting jobs and free its ordinal for the next
    member created. Returns how many jobs were cancelled."""
    with transaction.atomic():
        cancelled = _cancel_pending_jobs(member)
        if Member.objects.filter(pk=member.pk).delete()[0]:
            FreeOrdinal.objects.get_or_create(ordinal=member.ordinal)
    return cancelled


def _validated_external_ids(external_ids: Sequence[str]) -> list[str]:
    ids = list(external_ids)
    for value in ids:
        if not isinstance(value, str) or not value.strip() or len(value) > 200:
            raise PlanningInputError(ERR_EXTERNAL_ID)
    twice = sorted(value for value, seen in Counter(ids).items() if seen > 1)
    if twice:
        raise PlanningInputError(ERR_EXTERNAL_ID_TWICE.format(ids=", ".join(twice)))
    return ids


def _strategy() -> str:
    return planning_settings().phase_strategy


def _take_ordinals(count: int) -> list[int]:
    """The lowest freed ordinals first, then new ones above every ordinal ever given."""
    recurring_store().lock_ordinals()
    freed = list(FreeOrdinal.objects.order_by("ordinal").values_list("ordinal", flat=True)[:count])
    FreeOrdinal.objects.filter(ordinal__in=freed).delete()
    top = Member.objects.aggregate(top=Max("ordinal"))["top"]
    start = max([-1 if top is None else top, *freed]) + 1
    return freed + list(range(start, start + count - len(freed)))


def _plan_into_open_slices(members: Sequence[Member]) -> int:
    lock_active_tasks_shared()
    now = timezone.now()
    planned = 0
    for plan in slice_plans_open(now=now):
        inside = [m.id for m in members if plan.contains(m.phase)]
        if inside:
            planned += plan_members(plan, not_before=now, member_ids=inside)[0]
    return planned


def _job_keys(member: Member, plans: Sequence[SlicePlan]) -> list[str]:
    return [f"{job_key_prefix(plan.task_id, plan.period)}{member.id}" for plan in plans]


def _restore_cancelled_jobs(member: Member) -> int:
    now = timezone.now()
    keys = _job_keys(member, slice_plans_open(phase=member.phase, now=now))
    cancelled = Job.objects.filter(idempotency_key__in=keys, state=JobState.CANCELLED)
    restored = 0
    for job_id, run_at in cancelled.filter(run_at__gte=now).values_list("id", "run_at"):
        job_retry(job_id=job_id, run_at=run_at)
        restored += 1
    return restored


def _cancel_pending_jobs(member: Member) -> int:
    lock_active_tasks_shared()
    plans = slice_plans_with_pending_jobs(phase=member.phase, now=timezone.now())
    keys = _job_keys(member, plans)
    cancelled = 0
    waiting = Job.objects.filter(idempotency_key__in=keys, state__in=DUE_STATES)
    for job_id in waiting.values_list("id", flat=True):
        # One claimed in the meantime is not interrupted: that occurrence runs.
        cancelled += job_cancel_waiting(job_id=job_id)
    return cancelled
