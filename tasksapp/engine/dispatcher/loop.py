"""The dispatcher: learn from its due source which jobs of its partitions are due (the
database: poll ahead and a timing wheel; or the Redis due index), claim them at run time
in one statement, publish the claimed ids to Celery.

`step()` is one turn of the loop; `run()` repeats it until SIGTERM/SIGINT. Tests drive
`step()` directly, production runs `run()` (`manage.py dispatcher`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import time
from collections import Counter

from django.db import DatabaseError, InterfaceError
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from tasksapp.engine.cluster import cluster, sql
from tasksapp.engine.cluster.base import Coordinator
from tasksapp.engine.cluster.partitions import PEER_GONE, REBALANCE
from tasksapp.engine.db import tempo_connection
from tasksapp.engine.dispatcher.broker import BROKER_RETRY_SECONDS, BrokerGate, CeleryPublisher
from tasksapp.engine.dispatcher.degraded import DegradedMode
from tasksapp.engine.dispatcher.limited import LimitedClaimer
from tasksapp.engine.dispatcher.messages import slowest_handlers_read
from tasksapp.engine.dispatcher.routing import Route, RoutingRules, routing_rules_read
from tasksapp.engine.dispatcher.sources.base import (
    BACKPRESSURE_RETRY_MS,
    MODE_UNREACHABLE,
    ClaimOutcome,
    DispatchContext,
    DueSource,
    due_source_factory,
)
from tasksapp.engine.dispatcher.sources.database import DatabaseSource
from tasksapp.engine.dispatcher.upkeep import Upkeep
from tasksapp.engine.models import Dispatcher, DispatcherCounter
from tasksapp.engine.options import MIN_PRIORITY
from tasksapp.engine.runtime import freeze_startup_heap
from tasksapp.engine.sessions import use_engine_sessions
from tasksapp.engine.settings import TempoSettings
from tasksapp.engine.transitions import (
    Claim,
    job_claim_due,
    job_claim_limited,
)

log = logging.getLogger(__name__)

# Without notifications on SQLite (one instance) new work is found by this short poll.
LOCAL_POLL_SECONDS = 0.5
# The claim lead covers this many measured round trips to the database besides
# TEMPO_DISPATCH_LEAD_MS: a claim, its message and the start take several.
LEAD_ROUND_TRIPS = 12.0

COUNTER_FIELDS = (
    "polls",
    "rows_fetched",
    "claims",
    "claims_lost",
    "single_reads",
    "reaped",
    "messages",
    "notifications",
    "statements",
)
HEARTBEAT_SECONDS = 10.0
# Below its share after a round (a dead peer's locks still being released, a peer yet to
# hand over), an instance looks again this soon rather than a round later.
SHORT_OF_SHARE_RETRY_MS = 100
MAX_WAIT_SECONDS = 0.1  # wake up this often to notice signals (no query is made)


class DispatcherLoop:
    def __init__(
        self, *, name: str | None = None, publisher=None, settings: TempoSettings | None = None
    ) -> None:
        self.settings = settings or TempoSettings.load()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.partitions = self.settings.partitions
        self.publisher = publisher or CeleryPublisher(queue=self.settings.queue)
        self.broker = BrokerGate(
            publisher=self.publisher, settings=self.settings, now_ms=self.now_ms
        )
        # On PostgreSQL partitions are shared through advisory locks; work and peers are
        # announced by NOTIFY unless the dispatchers poll only (TEMPO_DISPATCH_NOTIFY).
        self.cluster = cluster()
        self.on_postgres = self.cluster.shared
        self.uses_notify = self.on_postgres and self.settings.dispatch_notify
        self.settings.check_dispatch(listen_notify=self.uses_notify, postgres=self.on_postgres)
        self.counters: Counter[str] = Counter()
        self.stopping = False
        self.coordinator: Coordinator | None = None
        self.record: Dispatcher | None = None
        self.rules = RoutingRules()
        self.degraded_reason = ""  # why only critical jobs are claimed now ("": all are)
        self.degraded = DegradedMode(
            threshold=self.settings.degraded_backlog,
            after_seconds=self.settings.degraded_after_seconds,
        )
        self.claim_floor = MIN_PRIORITY  # the lowest priority claimed now (min_priority)
        self.limited = LimitedClaimer(
            claim=self._claim_limited,
            rules=lambda: self.rules,
            min_priority=lambda: self.claim_floor,
            now_ms=self.now_ms,
            aging_ms=self.settings.priority_aging_seconds * 1000,
            name=f"{self.name} limited claimer",
        )
        self.source = self._due_source()
        self.upkeep = Upkeep(
            name=self.name,
            settings=self.settings,
            counters=self.counters,
            now_ms=self.now_ms,
            partitions=lambda: self.partitions,
            served=self._served,
            claims_waiting=self.broker.claims_waiting,
            hold_reaped=self._hold_reaped,
            on_postgres=self.on_postgres,
            uses_notify=self.uses_notify,
        )
        self.stepped_out = False  # out of the ring until the broker answers again
        self.adopt_orphans = False  # polling only: the watched peer died; take its share
        self._reset_schedule()

    def _due_source(self) -> DueSource:
        context = DispatchContext(
            name=self.name,
            settings=self.settings,
            counters=self.counters,
            flush_counters=self._flush_counters,
            now_ms=self.now_ms,
            lead_ms=self.lead_ms,
            owned=self._served,
            room_for=self.broker.room_for,
            claim_and_publish=self.claim_and_publish,
            rules=lambda: self.rules,
            min_priority=self.min_priority,
            limited=self.limited,
        )
        if self.settings.dispatch_mode == "database":
            return DatabaseSource(context, poll_seconds=self._poll_seconds())
        return due_source_factory(self.settings.dispatch_mode)(context)

    def _poll_seconds(self) -> float:
        """How often the database source polls: rarely with notifications, else often
        enough that no work is found late."""
        if self.uses_notify:
            return self.settings.poll_interval_seconds
        if self.on_postgres:
            return self.settings.notify_off_poll_seconds
        return LOCAL_POLL_SECONDS

    def _reset_schedule(self) -> None:
        self.next_coordination = 0.0
        self.next_heartbeat = 0.0
        self.next_slowest_read = 0.0
        self.rules_stale = True  # the routing rules are read again before the next claims
        self.upkeep.reset()

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        use_engine_sessions()
        self.record, _ = Dispatcher.objects.update_or_create(
            name=self.name,
            defaults={
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "started_at": timezone.now(),
                "stopped_at": None,
                "partitions": [],
                "dispatch_mode": self.source.initial_mode,
            },
        )
        self.coordinator = self.cluster.coordinator(
            partitions=self.partitions,
            instance_id=self.record.id,
            coordination_seconds=self.settings.coordination_seconds,
            listen=self.uses_notify,
        )
        self.coordinator.connect()
        self._load_rules()
        self._warm_up()
        freeze_startup_heap()
        log.info("dispatcher %s started (%s partitions)", self.name, self.partitions)

    def _warm_up(self) -> None:
        """Open the broker connection and run the claim once for no job (id -1 never
        exists) now, not on the first due job (together some 5-40 ms on a busy machine:
        a late claim)."""
        self.broker.warm_up()  # a broker away at start-up: heard of at the first turn
        job_claim_due(ids=[-1], owner=self.name, ttl=0)
        self._read_slowest_handlers()  # the first claims are packed too

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.start()
        while not self.stopping:
            self.step()
        self.stop()

    def _on_signal(self, signum, frame) -> None:
        log.info("dispatcher %s: signal %s, stopping", self.name, signum)
        self.stopping = True

    def stop(self) -> None:
        """Hand back everything held: unclaimed timers are dropped (they stay `scheduled`
        in the database), partition locks are released with the session."""
        self.limited.stop()
        self.source.forget()
        if self.coordinator is not None:
            self.coordinator.close()
        try:
            self._flush_counters()
            Dispatcher.objects.filter(name=self.name).update(stopped_at=Now(), partitions=[])
        except DatabaseError:
            log.exception("could not record the stop")
        log.info("dispatcher %s stopped", self.name)

    # -- one turn ---------------------------------------------------------------------
    def now_ms(self) -> float:
        return self.coordinator.clock.now_ms() if self.coordinator else time.time() * 1000

    def lead_ms(self, priority: int | None = None) -> int:
        """Claim this much before run_at, so the message is at a worker and the job started
        when the time comes (the handler waits for run_at; the start is guarded by the
        database clock): the configured lead, plus the round trips a claim, its message
        and the start take, counted from the measured round trip to the database. On a
        local network that adds a millisecond or two; 25 ms away, some 300 ms. A job of
        `priority` at or above the critical one: TEMPO_CRITICAL_LEAD_MS, if longer."""
        round_trip = self.coordinator.clock.round_trip_ms if self.coordinator else 0.0
        extra = LEAD_ROUND_TRIPS * round_trip
        lead = self.settings.dispatch_lead_ms
        if priority is not None and priority >= self.rules.critical_priority:
            lead = max(lead, self.settings.critical_lead_ms)  # critical: ready well ahead
        return lead + round(extra)  # the wheel counts whole ms

    def step(self, *, wait: bool = True) -> None:
        try:
            if self.stepped_out:
                self._wait_for_broker(wait=wait)
                return
            self._ensure_connected()
            self._hear_broker()  # the limited claimer's thread may have met an error
            if self.stepped_out:
                return
            if self.now_ms() >= self.next_coordination:
                self._coordinate()
            if self.rules_stale:
                self._load_rules()
            self._record_degraded()  # also while only the limited claimer holds jobs
            self.source.step()
            self._hear_broker()
            if self.stepped_out:  # the broker failed during this step
                return
            self.upkeep.step()
            if self.now_ms() >= self.next_heartbeat:
                self._heartbeat()
            if wait and not self.stopping:
                self._wait()
        except (DatabaseError, InterfaceError, OSError, _psycopg_error()) as exc:
            self._recover(exc)

    def _ensure_connected(self) -> None:
        assert self.coordinator is not None
        if not self.coordinator.connected:
            self.coordinator.connect()
            self._reset_schedule()
            self.source.reconnected()

    def _recover(self, exc: BaseException) -> None:
        """Database trouble: drop the session (and with it our partitions), forget what we
        hold, and start over on the next turn. Nothing is lost: it is all in the DB."""
        log.warning("dispatcher %s: database error, reconnecting: %s", self.name, exc)
        if self.coordinator is not None:
            try:
                self.coordinator.close()
            except Exception:
                log.debug("closing the coordination session failed", exc_info=True)
        tempo_connection().close()
        self.source.forget()
        time.sleep(1.0)

    def _coordinate(self) -> None:
        assert self.coordinator is not None
        change = self.coordinator.rebalance(adopt_orphans=self.adopt_orphans)
        self.adopt_orphans = False
        if change.repartitioned is not None:
            self._repartition(change.repartitioned)
            return
        if change.released:
            self.source.released(change.released)
        if change.gained:
            log.info("dispatcher %s: took partitions %s", self.name, change.gained)
            self.upkeep.partitions_gained()
            self.source.gained(change.gained)
        round_ms = self.settings.coordination_seconds * 1000
        if change.short:  # a share not free yet: its locks go within ms, not a round
            round_ms = min(round_ms, SHORT_OF_SHARE_RETRY_MS)
        self.next_coordination = self.now_ms() + round_ms

    def _repartition(self, count: int) -> None:
        """Work with another partition count: what is held was keyed by the old one, so
        start over (jobs held are still `scheduled` in the database; a claim already
        sent stays fenced by its token). Take the new partitions at once."""
        log.info("dispatcher %s: %s partitions now (was %s)", self.name, count, self.partitions)
        self.source.forget()
        self.partitions = count
        self.settings = dataclasses.replace(self.settings, partitions=count)
        self.source = self._due_source()
        self.next_coordination = 0.0
        self.upkeep.partitions_gained()

    def claim_and_publish(self, due: list[int], limited_queue: str | None = None) -> ClaimOutcome:
        """Claim these ids (fenced: only rows still due are won) and publish the claims,
        each to its queue. Ids of a limited queue are claimed within its limits, counted
        in the database; those held back by them are returned."""
        claims, outcome = self._claim(due, limited_queue)
        lost = len(due) - len(claims) - len(outcome.held)
        self.counters.update(statements=1, claims=len(claims), claims_lost=lost)
        if lost:
            self._flush_counters()
        if claims:
            self.upkeep.claims_made()
        self._publish_claims(claims)
        reads_here = limited_queue is None  # the loop's thread, not the limited claimer's
        if claims and reads_here and self.now_ms() >= self.next_slowest_read:
            self._read_slowest_handlers()  # after the publish: off this claim's path
        return outcome

    def _claim(self, due: list[int], limited_queue: str | None) -> tuple[list[Claim], ClaimOutcome]:
        ttl = self.settings.claim_ttl_seconds
        if limited_queue is None:
            return job_claim_due(ids=due, owner=self.name, ttl=ttl), ClaimOutcome()
        limited = job_claim_limited(
            queue=limited_queue, ids=due, owner=self.name, ttl=ttl, room=len(due)
        )
        return limited.claims, ClaimOutcome(limited.held, limited.next_start_ms)

    def _publish_claims(self, claims: list[Claim]) -> None:
        for queue, queue_claims in _by_queue(claims).items():
            if not self.broker.publish(queue, queue_claims):
                break

    def _claim_limited(self, due: list[int], queue: str) -> ClaimOutcome:
        """The limited claimer's claim, on its thread and connection: as many as the
        queue's Celery queue has room for (unless a concurrency limit bounds it), within
        the queue's limits, published. What the loop must know (its counters, the
        reaper's next look, a broker error) is handed over, not written here."""
        rest: list[int] = []
        if not self.rules.bounded(queue):
            room = self.broker.room_for(len(due), queue)
            if room <= 0:
                return ClaimOutcome(due, self.now_ms() + BACKPRESSURE_RETRY_MS)
            due, rest = due[:room], due[room:]
        claims, outcome = self._claim(due, queue)
        lost = len(due) - len(claims) - len(outcome.held)
        with self.limited.lock:
            self.limited.counters.update(statements=1, claims=len(claims), claims_lost=lost)
        if claims:
            self.upkeep.claims_made()
        self._publish_claims(claims)
        return ClaimOutcome(outcome.held + rest, outcome.retry_at_ms)

    def _hear_broker(self) -> None:
        """A send or a look at the broker failed (on either thread): step out."""
        error = self.broker.take_error()
        if error is not None:
            self._broker_unreachable(error)

    def _broker_unreachable(self, exc: BaseException) -> None:
        log.warning("dispatcher %s: broker unreachable, claiming nothing: %s", self.name, exc)
        if self.on_postgres and not self.stepped_out:
            self._step_out()

    def _step_out(self) -> None:
        """Out of the ring until the broker answers: jobs this instance cannot send are
        better claimed by a peer that can. Ending the coordination session hands every
        partition to the peers at once (their watcher sees this instance's lock go); with
        the broker down for everyone, every instance waits out here alike."""
        log.warning("dispatcher %s: handing its partitions to peers", self.name)
        assert self.coordinator is not None
        self.coordinator.close()
        self.source.forget()
        self.stepped_out = True
        self._heartbeat()

    def _wait_for_broker(self, *, wait: bool) -> None:
        """Out of the ring: ask the broker again every second; rejoin once it answers."""
        if wait:
            deadline = time.monotonic() + BROKER_RETRY_SECONDS
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(0.1)
        if self.now_ms() >= self.next_heartbeat:
            self._heartbeat()
        if not self.broker.answers():
            return
        log.info("dispatcher %s: broker reachable again, rejoining", self.name)
        self.stepped_out = False

    def _hold_reaped(self, due: list) -> None:
        """Polling only, no NOTIFY announces the next run of the jobs just returned: the
        reaper holds those due again itself, in whichever partition, and claims them like
        any other (fenced: if an owner's poll found one first, one of the two claims wins)."""
        if self.uses_notify or not isinstance(self.source, DatabaseSource):
            return
        for job_id, run_at_ms, priority, queue in due:
            self.source.announced(job_id, run_at_ms, Route(queue, priority, run_at_ms))

    def _heartbeat(self) -> None:
        offset = self.coordinator.clock.offset_ms if self.coordinator else 0.0
        Dispatcher.objects.filter(name=self.name).update(
            heartbeat_at=Now(),
            partitions=sorted(self.coordinator.owned if self.coordinator else ()),
            clock_offset_ms=offset,
        )
        self._flush_counters()
        self.rules_stale = True  # a missed NOTIFY costs at most one heartbeat
        self.next_heartbeat = self.now_ms() + HEARTBEAT_SECONDS * 1000

    def _read_slowest_handlers(self) -> None:
        """How long the workers' handlers hold a slot, for packing messages (messages.py):
        read at most as often as the workers report it, and only while claims are made
        (an idle dispatcher sends no statement for it)."""
        recent = self.settings.claim_ttl_seconds
        self.broker.slowest_ms = slowest_handlers_read(within_seconds=recent)
        self.next_slowest_read = self.now_ms() + self.settings.run_lease_seconds / 3 * 1000

    # -- routing ----------------------------------------------------------------------
    def _load_rules(self) -> None:
        self.rules = routing_rules_read()
        self.rules_stale = False
        self._record_degraded()
        self.limited.nudge()  # a queue resumed, a limit raised: look at once

    def min_priority(self) -> int:
        """The lowest priority claimed now: the critical one while degraded."""
        self._record_degraded()
        return self.claim_floor

    def _record_degraded(self) -> None:
        reason = self._degraded_now()
        if reason != self.degraded_reason:
            log.warning("dispatcher %s: degraded mode %s", self.name, reason or "off")
            self.degraded_reason = reason
            Dispatcher.objects.filter(name=self.name).update(degraded_reason=reason)
        floor = self.rules.critical_priority if reason else MIN_PRIORITY
        if floor != self.claim_floor:  # the limited claimer reads it: tell it at once
            self.claim_floor = floor
            self.limited.nudge()

    def _degraded_now(self) -> str:
        """Why only critical jobs may be claimed now, or "" (docs/ROUTING.md)."""
        return self.degraded.reason(
            now_ms=self.now_ms(),
            operator=self.rules.degraded,
            index_unreachable=getattr(self.source, "mode", None) == MODE_UNREACHABLE,
            waiting=self.source.waiting,
        )

    def _flush_counters(self) -> None:
        self.counters.update(self.limited.take_counters())
        self.counters.update(self.broker.take_counters())
        counts = {k: v for k, v in self.counters.items() if v}
        if not counts:
            return
        minute = timezone.now().replace(second=0, microsecond=0)
        row = DispatcherCounter.objects.filter(dispatcher=self.name, minute=minute)
        if not row.update(**{k: F(k) + v for k, v in counts.items()}):
            DispatcherCounter.objects.create(dispatcher=self.name, minute=minute, **counts)
        self.counters.clear()

    def _wait(self) -> None:
        assert self.coordinator is not None
        deadlines = [
            self.next_coordination,
            self.next_heartbeat,
            self.source.next_deadline(),
            self.upkeep.deadline(),
        ]
        timeout = min(MAX_WAIT_SECONDS, (min(deadlines) - self.now_ms()) / 1000)
        if timeout <= 0:
            return
        for payload in self.coordinator.wait(timeout):
            self._on_notification(payload)

    def _on_notification(self, payload: str) -> None:
        if self.uses_notify:  # polling only, the one wake-up is the peer watcher's
            self.counters.update(notifications=1)
        if payload == REBALANCE:  # a peer came or went: look at the partitions now
            self.next_coordination = 0.0
            self.upkeep.peer_gone()
            return
        if payload == PEER_GONE:  # polling only, no peer hears of it before its next round
            self.adopt_orphans = True
            self.next_coordination = 0.0
            self.upkeep.peer_gone()
            return
        if payload == sql.WORKER_GONE:  # a worker died (seen by its ring, or by a peer)
            self.upkeep.worker_gone()
            return
        if payload == sql.ROUTING_CHANGED:
            self.rules_stale = True
            return
        head, _, tail = payload.partition(":")
        job_id = int(head)
        if job_id % self.partitions not in self._served_set():
            return
        if tail == "x":
            self.source.announced(job_id, None)
            return
        run_at, priority, queue = (tail.split(":", 2) + ["", ""])[:3]
        route = Route(queue, int(priority), int(run_at)) if queue else None
        self.source.announced(job_id, int(run_at), route)

    def _served_set(self) -> set[int]:
        """The partitions served: owned, and those being handed to a peer."""
        return self.coordinator.served if self.coordinator else set()

    def _served(self) -> list[int]:
        return sorted(self._served_set())


def _by_queue(claims: list[Claim]) -> dict[str, list[Claim]]:
    grouped: dict[str, list[Claim]] = {}
    for claim in claims:
        grouped.setdefault(claim.queue, []).append(claim)
    return grouped


def _psycopg_error() -> type[Exception]:
    import psycopg

    return psycopg.Error
