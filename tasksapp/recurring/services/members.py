"""Members: a phase given once at creation, never changed; joining and leaving the
slices that are already planned."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import IntegrityError
from django.db.models import Max
from django.utils import timezone

from tasksapp.engine.db import tempo_atomic
from tasksapp.recurring import phases
from tasksapp.recurring.models import FreeOrdinal, Member, SlicePlan
from tasksapp.recurring.selectors.schedules import slice_plans_open
from tasksapp.recurring.settings import planning_settings
from tasksapp.recurring.store import recurring_store

from .errors import PlanningInputError
from .slices import lock_active_tasks_shared, plan_members

ERR_EXTERNAL_ID = "external_id must be a non-empty string of at most 200 characters."
ERR_EXTERNAL_ID_TWICE = "external_ids lists {ids} more than once."
ERR_MEMBER_EXISTS = "a member with external_id {ids} already exists."
ERR_MEMBER_IDS = "member_ids must be a list of 1 to 100000 member ids (whole numbers from 1)."

MAX_MEMBER_IDS = 100_000  # per call
MEMBER_CHUNK = 5_000  # ids per statement
MAX_ID = 2**63  # bigint


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
        with tempo_atomic():
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
    """Plan the member again; see member_activate_many."""
    member_activate_many(member_ids=[member.pk])
    member.active = True
    return member


def member_deactivate(*, member: Member) -> Member:
    """Stop planning the member and cancel its waiting jobs; see member_deactivate_many."""
    member_deactivate_many(member_ids=[member.pk])
    member.active = False
    return member


def member_delete(*, member: Member) -> int:
    """Delete the member; see member_delete_many. Returns how many jobs were cancelled."""
    return member_delete_many(member_ids=[member.pk]).jobs


def member_delete_many(*, member_ids: Sequence[int]) -> MemberBatch:
    """Delete the members, cancel their waiting jobs and free their ordinals for the next
    members created. Ids not found are skipped. A job claimed meanwhile is not
    interrupted: that occurrence runs."""
    return _in_chunks(member_ids, recurring_store().members_delete)


def member_deactivate_many(*, member_ids: Sequence[int]) -> MemberBatch:
    """Stop planning the members and cancel their waiting jobs; their phases are kept.
    Ids not found or inactive already are skipped."""
    return _in_chunks(member_ids, recurring_store().members_deactivate)


def member_activate_many(*, member_ids: Sequence[int]) -> MemberBatch:
    """Plan the members again in the slices already planned, where their time is still
    ahead: their cancelled jobs there are scheduled again, missing ones are created. Ids
    not found or active already are skipped."""

    def activate(*, ids: Sequence[int], now: dt.datetime) -> tuple[int, int]:
        done = recurring_store().members_activate(ids=ids, now=now)
        return done.members, done.restored + _plan_missing(done.missing, now=now)

    return _in_chunks(member_ids, activate)


@dataclass(frozen=True)
class MemberBatch:
    """What a batch call did: the members it deleted, deactivated or activated, and the
    jobs it cancelled (activation: scheduled again or created)."""

    members: int = 0
    jobs: int = 0


def _in_chunks(member_ids: Sequence[int], change: Callable[..., tuple[int, int]]) -> MemberBatch:
    """`change` applied to every MEMBER_CHUNK ids in one statement (and its own
    transaction, unless the caller holds one), after the active tasks are held (see
    the package docstring)."""
    ids = _validated_member_ids(member_ids)
    members = jobs = 0
    for start in range(0, len(ids), MEMBER_CHUNK):
        with tempo_atomic():
            lock_active_tasks_shared()
            changed, moved = change(ids=ids[start : start + MEMBER_CHUNK], now=timezone.now())
        members, jobs = members + changed, jobs + moved
    return MemberBatch(members=members, jobs=jobs)


def _validated_member_ids(member_ids: Sequence[int]) -> list[int]:
    ids = list(member_ids) if isinstance(member_ids, list | tuple) else None
    valid = (
        ids is not None
        and 0 < len(ids) <= MAX_MEMBER_IDS
        and all(type(i) is int and 0 < i < MAX_ID for i in ids)
    )
    if not valid:
        raise PlanningInputError(ERR_MEMBER_IDS)
    return sorted(set(ids))  # one order for every batch: concurrent batches do not deadlock


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


def _plan_missing(missing: Sequence[tuple[int, int]], *, now: dt.datetime) -> int:
    """Create the missing jobs ((slice plan id, member id)): one insert per slice plan
    named, the planner's own; none when nothing is missing."""
    members: dict[int, list[int]] = {}
    for plan_id, member_id in missing:
        members.setdefault(plan_id, []).append(member_id)
    plans = SlicePlan.objects.filter(id__in=members).select_related("task").order_by("id")
    return sum(plan_members(p, not_before=now, member_ids=members[p.id])[0] for p in plans)
