"""The dispatcher's upkeep: the duties beside claiming, each with its own next-due time.

- The reaper returns the jobs of expired leases in the served partitions (those whose
  messages may still wait in the broker keep their claims), while leases are out: an
  idle dispatcher sends no statement.
- The look for dead workers (their liveness lock gone) ends their leases at once, every
  tuning.WORKER_CHECK_SECONDS while jobs are leased, and at once when the lock ring says
  a worker or a peer died; after a worker's death, this dispatcher's own claims that the
  dead worker had taken unstarted are returned too, and those made just before the death
  once they have settled.
- A dead peer dispatcher's unstarted claims (perhaps never published) are returned when
  the lock ring says it died, and once at start.

The loop calls `step()` each turn, waits no longer than `deadline()`, and tells it what
happened (`claims_made`, `partitions_gained`, `peer_gone`, `worker_gone`).
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from collections.abc import Callable

from tasksapp.engine.cluster import cluster, sql
from tasksapp.engine.settings import TempoSettings
from tasksapp.engine.transitions import (
    job_expire_claims_of_dead_dispatchers,
    job_expire_dead_workers,
    job_expire_lost_claims,
    job_reap_expired,
)

log = logging.getLogger(__name__)

# After a peer dispatcher's death, a check for dead workers that found none looks once
# more this soon: a worker killed beside it may end its session a moment later.
DEAD_PEER_RECHECK_MS = 100
# After a worker's death, a claim not started this long after it was made, whose message
# no longer waits in the broker, was taken by the dead worker: returned at once. (A live
# worker starts a message it takes within milliseconds: it only takes one with a free slot.)
LOST_CLAIM_SETTLE_SECONDS = 0.25
LOST_CLAIM_RECHECK_MS = LOST_CLAIM_SETTLE_SECONDS * 1000 + 50
REAP_SLACK_MS = 500  # look this long after a claim's lease would run out


class Upkeep:
    def __init__(
        self,
        *,
        name: str,
        settings: TempoSettings,
        counters: Counter[str],
        now_ms: Callable[[], float],
        partitions: Callable[[], int],
        served: Callable[[], list[int]],
        claims_waiting: Callable[[], list[int]],
        hold_reaped: Callable[[list], None],
        on_postgres: bool,
        uses_notify: bool,
    ) -> None:
        self.name = name
        self.settings = settings
        self.counters = counters
        self.now_ms = now_ms
        self.partitions = partitions
        self.served = served
        self.claims_waiting = claims_waiting
        self.hold_reaped = hold_reaped
        self.on_postgres = on_postgres
        self.uses_notify = uses_notify
        # Dead workers are seen by their liveness locks (PostgreSQL only).
        self.worker_checks = on_postgres and settings.worker_check_seconds > 0
        self._reaps_asked: deque[float] = deque()  # appended from the limited claimer too
        self.reset()

    def reset(self) -> None:
        """Everything due at once (start, a new coordination session)."""
        self.next_reap: float | None = 0.0
        self.next_worker_check = 0.0
        self.worker_recheck = False  # a dead peer's worker may die a moment after it
        self.dead_peer_claims = True  # look for unstarted claims of dead dispatchers
        self.lost_claims = False  # a worker died: look for own claims it took unstarted
        # ... and once more when the claims made just before the death have settled
        self.lost_claims_again_at: float | None = None

    # -- what happened ------------------------------------------------------------------
    def claims_made(self) -> None:
        """Claims were made (on either thread): the reaper looks when their leases end."""
        self._reaps_asked.append(
            self.now_ms() + self.settings.claim_ttl_seconds * 1000 + REAP_SLACK_MS
        )

    def partitions_gained(self) -> None:
        """Partitions came to this instance: their owner may have died (seen by a round,
        not only by the lock ring): its expired leases and its unstarted claims."""
        self.next_reap = 0.0
        self.dead_peer_claims = True

    def peer_gone(self) -> None:
        """A peer came or went (the lock ring): its claims, and a worker beside it."""
        self.dead_peer_claims = True
        self.look_for_dead_workers(again=True)

    def worker_gone(self) -> None:
        self.lost_claims = True
        self.look_for_dead_workers()

    def look_for_dead_workers(self, *, again: bool = False) -> None:
        """Check for dead workers now. `again`: a peer dispatcher died, perhaps with a
        worker beside it (one host, one container) whose session may end a moment later:
        a check that finds none is followed by one more, DEAD_PEER_RECHECK_MS later."""
        self.next_worker_check = 0.0
        self.worker_recheck = self.worker_recheck or again

    # -- the duties -----------------------------------------------------------------------
    def deadline(self) -> float:
        """When a duty is next due (database ms; inf: none until something happens)."""
        deadlines = [math.inf]
        if self._watching_workers():
            deadlines.append(self.next_worker_check)
        if self.next_reap is not None:
            deadlines.append(self.next_reap)
        if self.lost_claims_again_at is not None:
            deadlines.append(self.lost_claims_again_at)
        return min(deadlines)

    def step(self) -> None:
        while self._reaps_asked:
            self.next_reap = min(self.next_reap or math.inf, self._reaps_asked.popleft())
        if self.dead_peer_claims:
            self._return_claims_of_dead_peers()
        if self._watching_workers() and self.now_ms() >= self.next_worker_check:
            self._check_workers()
        if self.lost_claims_again_at is not None and self.now_ms() >= self.lost_claims_again_at:
            self.lost_claims_again_at = None
            self._expire_lost_claims()
        if self.next_reap is not None and self.now_ms() >= self.next_reap:
            self.reap()

    def reap(self, *, everywhere: bool = False) -> None:
        owned = list(range(self.partitions())) if everywhere else self.served()
        reaped = job_reap_expired(
            partitions=self.partitions(),
            owned=owned,
            waiting=self.claims_waiting(),
            ttl=self.settings.claim_ttl_seconds,
        )
        self.counters.update(statements=1, reaped=reaped.count)
        if reaped.count:
            log.info("dispatcher %s: returned %s jobs with expired leases", self.name, reaped.count)
            self.hold_reaped(reaped.due)
        expiry_ms = reaped.next_expiry_ms
        self.next_reap = None if expiry_ms is None else expiry_ms + 200

    def _watching_workers(self) -> bool:
        """While jobs are leased in its partitions (the reaper has a next look), never
        when idle: an idle dispatcher sends no statement."""
        return self.worker_checks and self.next_reap is not None

    def _check_workers(self) -> None:
        """Workers that died (their liveness lock is gone): their running jobs' leases end
        now, and this instance returns them at once, in every partition (one dispatcher
        finds each death). With notifications the owners learn of the jobs by NOTIFY, as of
        any retry; polling only, the finder holds and claims them itself. Polling only,
        each dispatcher also reaps its own partitions at every check (a death found by a
        peer whose reap failed, a claim's lease run out)."""
        dead = job_expire_dead_workers(grace=self.settings.run_lease_seconds)
        if dead:  # (the look itself reads the workers' rows and locks, not the jobs table)
            self.counters.update(statements=1)
            log.warning("dispatcher %s: worker processes died: %s", self.name, ", ".join(dead))
            self._tell_peers_of_worker_death()
        if dead or self.lost_claims:
            self._expire_lost_claims()
            # A claim made within the settle time before the death may have been the dead
            # worker's too: it is not returned yet (a live worker may be taking its
            # message this very moment). Look again once it has settled.
            self.lost_claims_again_at = self.now_ms() + LOST_CLAIM_RECHECK_MS
        if dead:
            self.reap(everywhere=True)
        elif not self.uses_notify:
            self.reap()
        interval_ms = self.settings.worker_check_seconds * 1000
        if self.worker_recheck and not dead:
            interval_ms = min(interval_ms, DEAD_PEER_RECHECK_MS)
        self.worker_recheck = False
        self.next_worker_check = self.now_ms() + interval_ms

    def _return_claims_of_dead_peers(self) -> None:
        """A peer dispatcher died (or this one started): its claims not started, perhaps
        never published, are returned now instead of when their leases run out."""
        self.dead_peer_claims = False
        if not self.on_postgres:
            return
        expired = job_expire_claims_of_dead_dispatchers()
        self.counters.update(statements=1)
        if expired:
            log.info("dispatcher %s: %s claims of dead dispatchers returned", self.name, expired)
            self.reap(everywhere=True)

    def _expire_lost_claims(self) -> None:
        """A worker died: this dispatcher's claims that it took and never started end
        their leases now (the reap that follows returns them)."""
        self.lost_claims = False
        expired = job_expire_lost_claims(
            owner=self.name, waiting=self.claims_waiting(), settle=LOST_CLAIM_SETTLE_SECONDS
        )
        self.counters.update(statements=1)
        if expired:
            log.info("dispatcher %s: %s claims lost with a dead worker", self.name, expired)
            self.reap()

    def _tell_peers_of_worker_death(self) -> None:
        """Each dispatcher knows which of its own claims may still wait in the broker:
        wake them all to look for theirs (with notifications; polling only, the finder's
        own are found and the others' leases run out)."""
        if self.uses_notify:
            cluster().notify(sql.WORKER_GONE)
