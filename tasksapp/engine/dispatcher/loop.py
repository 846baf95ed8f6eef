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
from tasksapp.engine.dispatcher.claimer import Claimer
from tasksapp.engine.dispatcher.clock import LoopClock
from tasksapp.engine.dispatcher.degraded import DegradedMode
from tasksapp.engine.dispatcher.messages import slowest_handlers_read
from tasksapp.engine.dispatcher.routing import Route, RoutingRules, routing_rules_read
from tasksapp.engine.dispatcher.sources.base import MODE_UNREACHABLE, DueSource, due_source_factory
from tasksapp.engine.dispatcher.sources.database import DatabaseSource
from tasksapp.engine.dispatcher.upkeep import Upkeep
from tasksapp.engine.models import Dispatcher, DispatcherCounter
from tasksapp.engine.options import MIN_PRIORITY
from tasksapp.engine.runtime import freeze_startup_heap
from tasksapp.engine.sessions import use_engine_sessions
from tasksapp.engine.settings import TempoSettings
from tasksapp.engine.transitions import job_claim_due

log = logging.getLogger(__name__)

# Without notifications on SQLite (one instance) new work is found by this short poll:
# a job made due at once (a graph's next task, a retry, "run now") waits for it. At 0.5 s
# the embedded demo's graph tasks started up to 0.85 s late; at 0.2 s the dispatcher
# spends 3 % of a core during the demo, against 2 % (bench/embedded, docs/BENCHMARKS.md).
LOCAL_POLL_SECONDS = 0.2

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
        self.clock = LoopClock(self.settings)
        self.publisher = publisher or CeleryPublisher(queue=self.settings.queue)
        self.broker = BrokerGate(
            publisher=self.publisher, settings=self.settings, now_ms=self.clock.now_ms
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
        self.claim_floor = MIN_PRIORITY  # the lowest priority claimed now
        self.claimer = Claimer(
            name=self.name, settings=self.settings, broker=self.broker, clock=self.clock
        )
        self.source = self._due_source()
        self.upkeep = Upkeep(
            name=self.name,
            settings=self.settings,
            counters=self.counters,
            now_ms=self.clock.now_ms,
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
        if self.settings.dispatch_mode == "database":
            return DatabaseSource(
                settings=self.settings, clock=self.clock, poll_seconds=self._poll_seconds()
            )
        factory = due_source_factory(self.settings.dispatch_mode)
        return factory(name=self.name, settings=self.settings, clock=self.clock)

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
        self.clock.coordinator = self.coordinator
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
        self.claimer.stop()
        self._forget()
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
        return self.clock.now_ms()

    def lead_ms(self, priority: int | None = None) -> int:
        return self.clock.lead_ms(priority)

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
            self._dispatch()
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
        self._forget()
        time.sleep(1.0)

    def _coordinate(self) -> None:
        assert self.coordinator is not None
        change = self.coordinator.rebalance(adopt_orphans=self.adopt_orphans)
        self.adopt_orphans = False
        if change.repartitioned is not None:
            self._repartition(change.repartitioned)
            return
        if change.released:
            released = set(change.released)
            self.source.released(change.released)
            self.claimer.drop_where(lambda key: key % self.partitions in released)
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
        self._forget()
        self.partitions = count
        self.settings = dataclasses.replace(self.settings, partitions=count)
        self.source = self._due_source()
        self.next_coordination = 0.0
        self.upkeep.partitions_gained()

    def _dispatch(self) -> None:
        """Hand the jobs due now to the claimer, which claims and publishes them."""
        self.claimer.add(self.source.due(self._served()))
        self._record_degraded()  # the source may have lost its index this turn
        made = self.claimer.claim_due() + self.claimer.limited.take_claimed()
        if made:
            self.upkeep.claims_made()
            if self.now_ms() >= self.next_slowest_read:
                self._read_slowest_handlers()  # after the publish: off this claim's path
        if self.source.counters["polls"] or self.claimer.counters["claims_lost"]:
            self._flush_counters()  # scored events are written at once: a SIGKILL loses none

    def _announce(self, job_id: int, run_at_ms: int | None, route: Route | None = None) -> None:
        if self.source.announced(job_id, run_at_ms, route):
            self.claimer.withdraw(job_id)

    def _forget(self) -> None:
        """Drop every job held: they are all still `scheduled` in the database."""
        self.source.forget()
        self.claimer.forget()

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
        self._forget()
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
            self._announce(job_id, run_at_ms, Route(queue, priority, run_at_ms))

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
        self.clock.critical_priority = self.rules.critical_priority
        self._record_degraded()
        self.claimer.route_by(self.rules, self.claim_floor)  # a queue resumed: look at once

    def _record_degraded(self) -> None:
        reason = self._degraded_now()
        if reason != self.degraded_reason:
            log.warning("dispatcher %s: degraded mode %s", self.name, reason or "off")
            self.degraded_reason = reason
            Dispatcher.objects.filter(name=self.name).update(degraded_reason=reason)
        floor = self.rules.critical_priority if reason else MIN_PRIORITY
        if floor != self.claim_floor:  # the claimers: at once
            self.claim_floor = floor
            self.claimer.route_by(self.rules, floor)

    def _degraded_now(self) -> str:
        """Why only critical jobs may be claimed now, or "" (docs/ROUTING.md)."""
        return self.degraded.reason(
            now_ms=self.now_ms(),
            operator=self.rules.degraded,
            index_unreachable=getattr(self.source, "mode", None) == MODE_UNREACHABLE,
            waiting=self.claimer.waiting,
        )

    def _flush_counters(self) -> None:
        for part in (self.source, self.claimer):
            self.counters.update(part.counters)
            part.counters.clear()
        self.counters.update(self.claimer.limited.take_counters())
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
        held_back = self.claimer.next_deadline()
        if held_back is not None:  # jobs held back: look at them again then
            deadlines.append(held_back)
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
            self._announce(job_id, None)
            return
        run_at, priority, queue = (tail.split(":", 2) + ["", ""])[:3]
        route = Route(queue, int(priority), int(run_at)) if queue else None
        self._announce(job_id, int(run_at), route)

    def _served_set(self) -> set[int]:
        """The partitions served: owned, and those being handed to a peer."""
        return self.coordinator.served if self.coordinator else set()

    def _served(self) -> list[int]:
        return sorted(self._served_set())


def _psycopg_error() -> type[Exception]:
    import psycopg

    return psycopg.Error
