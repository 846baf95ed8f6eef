"""After a worker's death, a dispatcher's own claim made just before it (within the settle
time, so not returned by the first look: a live worker may be taking its message) is
returned by a second look once it has settled, not when its lease runs out."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from django.db import connection

from tasksapp.engine.dispatcher.upkeep import LOST_CLAIM_RECHECK_MS, Upkeep
from tasksapp.engine.models import Job, WorkerProcess
from tasksapp.engine.settings import tempo_settings
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)
NO_LOCK_KEY = 987_654  # a liveness key no session holds: its worker is dead


def _now_ms() -> float:
    return time.time() * 1000


def _upkeep(returned: list) -> Upkeep:
    upkeep = Upkeep(
        name="da",
        settings=tempo_settings(),
        counters=Counter(),
        now_ms=_now_ms,
        partitions=lambda: 16,
        served=lambda: list(range(16)),
        claims_waiting=lambda: [],
        hold_reaped=returned.extend,
        on_postgres=True,
        uses_notify=True,
    )
    upkeep.next_reap = _now_ms() + 60_000  # leases are out: dead workers are looked for
    return upkeep


def _claimed_just_now() -> Job:
    job = JobFactory(delivery="at_least_once")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE tasksapp_job SET state = 'claimed', lease_token = 1, claimed_by = 'da',"
            " claimed_at = clock_timestamp(),"
            " lease_expires_at = clock_timestamp() + interval '15 seconds' WHERE id = %s",
            [job.id],
        )
    return job


def test_a_claim_made_just_before_a_workers_death_is_returned_once_settled():
    WorkerProcess.objects.create(name="wb", hostname="h", pid=1, liveness_key=NO_LOCK_KEY)
    job = _claimed_just_now()
    returned: list = []
    upkeep = _upkeep(returned)

    upkeep.worker_gone()
    upkeep.step()
    job.refresh_from_db()
    assert job.state == "claimed", "too young to tell from a message in transit"
    assert upkeep.deadline() <= _now_ms() + LOST_CLAIM_RECHECK_MS

    time.sleep(LOST_CLAIM_RECHECK_MS / 1000 + 0.05)
    upkeep.step()
    job.refresh_from_db()
    assert job.state == "scheduled" and job.lease_expires_at is None
    assert [due[0] for due in returned] == [job.id]
    assert upkeep.lost_claims_again_at is None, "one look more, not a poll"


def test_a_claim_still_waiting_in_the_broker_is_kept_by_the_second_look_too():
    WorkerProcess.objects.create(name="wb", hostname="h", pid=1, liveness_key=NO_LOCK_KEY)
    job = _claimed_just_now()
    upkeep = _upkeep([])
    upkeep.claims_waiting = lambda: [job.id]

    upkeep.worker_gone()
    upkeep.step()
    time.sleep(LOST_CLAIM_RECHECK_MS / 1000 + 0.05)
    upkeep.step()
    job.refresh_from_db()
    assert job.state == "claimed" and job.lease_token == 1
