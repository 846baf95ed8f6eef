"""The Redis due index as due source: the dispatcher's side of `index.py`.

Each owned partition is one shard and is either *indexed* (its due jobs come from
Redis) or served by an inner database source (poll + timing wheel) while its shard is
rebuilt or Redis is unreachable. The owner of a partition (advisory lock, as in
database mode) is the only instance that writes its shard, so rebuilds never overlap.

- Index writes: the NOTIFY trigger already announces, after commit, every insert,
  reschedule, retry, reap and cancel of work due within 15 min from every writer
  (including the planner's set-based insert); the owner turns it into ZADD/ZREM.
  Work due later is read into the index by a sync every `SYNC_SECONDS`
  (jobs-table reads, counted as polls).
- Take: members due by now + lead move to in-flight (one Lua script), with the routes
  the index keeps beside them (queue, priority), and are handed to the inner database
  source (which holds those not yet within their own lead), then dropped from
  in-flight. From there the dispatcher's claimer claims them as in database mode:
  highest priority first, paused queues held, limited queues claimed by the limited
  claimer within their limits. Should the dispatcher die holding them, they
  are still `scheduled` rows: the peer that takes the partition reads every scheduled job
  of the notify window into the index again (`_check_pending`).
- Loss: a shard marker missing for the current generation (FLUSHALL, restart, failover)
  or any Redis error sends the shard(s) to database polling at once; the owner rebuilds
  them from the `scheduled` rows, page by page, and switches back.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter

import redis

from tasksapp.contrib.redis_index.index import MAX_TAKE, RedisIndex, Taken
from tasksapp.engine.dispatcher.routing import Route, default_route
from tasksapp.engine.dispatcher.sources.base import MODE_UNREACHABLE, DispatchClock
from tasksapp.engine.dispatcher.sources.database import POLL_LIMIT, DatabaseSource
from tasksapp.engine.models import Dispatcher
from tasksapp.engine.options import MAX_PRIORITY
from tasksapp.engine.settings import NOTIFY_WINDOW_SECONDS, TempoSettings
from tasksapp.engine.transitions import DueJob, job_poll_due

log = logging.getLogger(__name__)

MODE_REDIS = "redis"
MODE_FALLBACK = "redis-fallback"  # some shards are rebuilt, served by polling meanwhile
WINDOW_MS = NOTIFY_WINDOW_SECONDS * 1000
SYNC_SECONDS = 300.0  # how often the index takes in work due beyond the notify window
CHECK_SECONDS = 1.0  # how often an idle dispatcher asks the index (an emptied Redis)
RETURN_SECONDS = 2.0  # how often expired takes are looked for and returned
DEFAULT_PARTITIONS = 16  # TEMPO_PARTITIONS' default
HORIZON_MARGIN_MS = 2000
MAX_BACKOFF_SECONDS = 16.0  # clock estimates: the recorded horizon errs on the early side


class RedisIndexSource:
    # Starts on polling while it checks (or builds) the index.
    initial_mode = MODE_FALLBACK

    def __init__(self, *, name: str, settings: TempoSettings, clock: DispatchClock) -> None:
        self.name = name  # the dispatcher's: owner of its takes, in its log lines
        self.settings = settings
        self.clock = clock
        self.partitions = settings.partitions
        self.counters: Counter[str] = Counter()
        self.owned: list[int] = []  # the partitions served, as of the last turn
        self.database = DatabaseSource(
            settings=settings, clock=clock, poll_seconds=settings.poll_interval_seconds
        )
        self.index = RedisIndex(url=self.settings.index_redis_url, prefix=self._prefix())
        self.lease_ms = int(self.settings.index_lease_seconds * 1000)
        self.reset()

    def _prefix(self) -> str:
        """Shards are partitions: another partition count gets an index of its own (built
        anew, served from the database meanwhile). The default count keeps the plain one."""
        if self.partitions == DEFAULT_PARTITIONS:
            return self.settings.index_prefix
        return f"{self.settings.index_prefix}p{self.partitions}:"

    def reset(self) -> None:
        """Nothing indexed: every owned shard is polled until it is known to be built."""
        self.indexed: set[int] = set()
        self.pending: set[int] = set()  # owned, to check (gained) or rebuild
        self.rebuilding: set[int] = set()  # being rebuilt now (notifications go to Redis)
        self.rebuild_cursor = None
        self.rebuild_generation = ""
        self.rebuild_horizon_ms = 0
        self.reachable = True
        self.failures = 0  # consecutive failed attempts to reach Redis
        self.next_try = 0.0
        self.next_take = 0.0
        self.next_sync = 0.0
        self.next_return = 0.0
        self.mode = ""

    # -- ownership ----------------------------------------------------------------------
    def gained(self, partitions: list[int]) -> None:
        self.database.gained(partitions)
        self.pending |= set(partitions)
        self.next_try = 0.0

    def released(self, partitions: list[int]) -> None:
        self.database.released(partitions)
        for group in (self.indexed, self.pending, self.rebuilding):
            group -= set(partitions)

    def reconnected(self) -> None:
        self.database.reconnected()

    def forget(self) -> None:
        self.database.forget()
        self.reset()

    def _unindexed(self) -> list[int]:
        """The owned partitions the database source serves: all but the indexed ones."""
        return [p for p in self.owned if p not in self.indexed]

    # -- one turn -----------------------------------------------------------------------
    def due(self, owned: list[int]) -> list[tuple[int, Route]]:
        self.owned = owned
        self._serve_index()
        due = self.database.due(self._unindexed())
        self.counters.update(self.database.counters)
        self.database.counters.clear()
        return due

    def _serve_index(self) -> None:
        now = self.clock.now_ms()
        try:
            if not self.reachable and now < self.next_try:
                return
            if self.pending and now >= self.next_try:
                self._check_pending()
            if self.rebuilding or self.pending:
                self._rebuild_page()
            if self.indexed and now >= self.next_sync:
                self._sync()
            if self.indexed and self.clock.now_ms() >= self.next_take:
                self._take()
            if self.clock.now_ms() >= self.next_return:
                self._return_expired()
            self.reachable, self.failures = True, 0
        except redis.RedisError as exc:
            self._lost_redis(exc)
        self._record_mode()

    def next_deadline(self) -> float:
        return min(self._index_deadline(), self.database.next_deadline())

    def _index_deadline(self) -> float:
        if not self.reachable or self.pending:
            return self.next_try
        if self.rebuilding:
            return self.clock.now_ms()
        return min(self.next_take, self.next_sync, self.next_return)

    def _lost_redis(self, exc: Exception) -> None:
        if self.reachable:
            log.warning("dispatcher %s: redis unreachable, polling: %s", self.name, exc)
        owned = set(self.owned)
        self._to_database(owned)
        self.reachable = False
        self.pending = owned  # whatever was announced meanwhile is only in the database
        # Back off: a Redis that times out would otherwise stall the polling loop often.
        self.failures += 1
        backoff = CHECK_SECONDS * 2 ** (self.failures - 1)
        backoff = min(MAX_BACKOFF_SECONDS, backoff)
        self.next_try = self.clock.now_ms() + backoff * 1000

    def _lost_shards(self, shards: set[int]) -> None:
        """The index no longer holds these shards (emptied Redis): poll, then rebuild."""
        log.warning("dispatcher %s: index lost for shards %s", self.name, sorted(shards))
        self._to_database(shards)
        self.pending |= shards

    def _to_database(self, shards: set[int]) -> None:
        """Serve these shards by polling from now on: poll them at once."""
        moved = shards & self.indexed
        self.indexed -= shards
        self.rebuilding -= shards
        if moved:
            self.database.rewind()

    # -- shards: check, rebuild, sync -------------------------------------------------
    def _check_pending(self) -> None:
        """Gained or lost shards: built ones are caught up (notifications may have been
        missed while nobody owned them), the others are rebuilt."""
        horizons = self.index.horizons(sorted(self.pending))
        built = {p for p, h in horizons.items() if h is not None and self.reachable}
        self.rebuilding |= set(horizons) - built
        self.pending = set()
        for shard in self.rebuilding:
            self.index.begin_rebuild(shard)
        if built:
            self._read_into_index(sorted(built), after=None)
            self._switch_to_index(built)
        if self.rebuilding:
            log.info("dispatcher %s: rebuilding shards %s", self.name, sorted(self.rebuilding))
            self.rebuild_generation = self.index.generation()
            self.rebuild_cursor = None
            self.rebuild_horizon_ms = int(self.clock.now_ms()) + WINDOW_MS - HORIZON_MARGIN_MS

    def _rebuild_page(self) -> None:
        """One page of the rebuild; the last one marks the shards built and switches
        them back to the index."""
        if not self.rebuilding:
            return
        shards = sorted(self.rebuilding)
        rows = self._read_page(shards, after=self.rebuild_cursor)
        if len(rows) >= POLL_LIMIT:
            self.rebuild_cursor = (rows[-1].run_at, rows[-1].id)
            return
        done = {
            p
            for p in shards
            if self.index.mark_built(
                p, generation=self.rebuild_generation, horizon_ms=self.rebuild_horizon_ms
            )
        }
        self.rebuilding = set()
        self.pending |= set(shards) - done  # the generation changed meanwhile: again
        self._switch_to_index(done)
        if done:
            log.info("dispatcher %s: shards %s indexed again", self.name, sorted(done))

    def _switch_to_index(self, shards: set[int]) -> None:
        self.indexed |= shards
        self.database.drop_held(shards)  # they are in the index now
        self.next_take = 0.0
        if not self.next_sync:  # just read up to the window's end
            self.next_sync = self.clock.now_ms() + SYNC_SECONDS * 1000

    def _sync(self) -> None:
        """Read jobs due between the shards' horizon and the notify window's end."""
        shards = sorted(self.indexed)
        horizons = [h for h in self.index.horizons(shards).values() if h is not None]
        floor = min(horizons) if horizons else None
        new_horizon = int(self.clock.now_ms()) + WINDOW_MS - HORIZON_MARGIN_MS
        self._read_into_index(shards, after=floor)
        self.index.set_horizon(shards, new_horizon)
        self.next_sync = self.clock.now_ms() + SYNC_SECONDS * 1000

    def _read_into_index(self, shards: list[int], *, after: int | None) -> None:
        cursor = None
        if after is not None:
            cursor = (dt.datetime.fromtimestamp((after - 1) / 1000, tz=dt.UTC), 0)
        while True:
            rows = self._read_page(shards, after=cursor)
            if len(rows) < POLL_LIMIT:
                return
            cursor = (rows[-1].run_at, rows[-1].id)

    def _read_page(self, shards: list[int], *, after) -> list[DueJob]:
        rows = job_poll_due(
            lookahead=NOTIFY_WINDOW_SECONDS,
            partitions=self.partitions,
            owned=shards,
            limit=POLL_LIMIT,
            after=after,
        )
        self.counters.update(polls=1, statements=1, rows_fetched=len(rows))
        parts = self.partitions
        self.index.add_many(
            [(r.id % parts, r.id, r.run_at_ms) for r in rows],
            {r.id: (r.priority, r.queue) for r in rows},
        )
        return rows

    # -- take, claim, return ------------------------------------------------------------
    def _take(self) -> None:
        """Everything due, with its route, to the inner database source: this turn's
        `due()` hands it to the claimer, which claims it per queue and priority, within
        pauses, limits and backpressure."""
        now = self.clock.now_ms()
        taken = self.index.take(
            shards=sorted(self.indexed),
            until_ms=int(now + self._take_lead_ms()),
            lease_ms=self.lease_ms,
            limit=MAX_TAKE,
        )
        if taken.unbuilt:
            self._lost_shards(set(taken.unbuilt))
        ids = taken.all_ids()
        if ids:
            self.database.hold_due([(i, _taken_route(taken, i, now)) for i in ids])
            self.index.ack(taken)
        self._plan_next_take(taken, now, full=len(ids) >= MAX_TAKE)

    def _take_lead_ms(self) -> int:
        """Take jobs as far ahead as the longest lead (a critical job's): the database
        source holds the others in its wheel until their own lead."""
        return self.clock.lead_ms(MAX_PRIORITY)

    def _plan_next_take(self, taken: Taken, now: float, *, full: bool) -> None:
        check = now + CHECK_SECONDS * 1000
        if full:  # more may be due: again next turn
            self.next_take = now
        elif taken.next_ms is not None:
            self.next_take = min(check, taken.next_ms - self._take_lead_ms())
        else:
            self.next_take = check

    def _return_expired(self) -> None:
        interval_ms = int(RETURN_SECONDS * 1000)
        returned = self.index.return_expired(
            partitions=self.partitions,
            owner=self.name,
            now_ms=int(self.clock.now_ms()),
            lock_ms=interval_ms,
        )
        if returned > 0:
            log.info("dispatcher %s: returned %s expired takes", self.name, returned)
            self.next_take = 0.0
        self.next_return = self.clock.now_ms() + interval_ms

    # -- notifications ------------------------------------------------------------------
    def announced(self, job_id: int, run_at_ms: int | None, route: Route | None = None) -> bool:
        if self._index_announced(job_id, run_at_ms, route):
            return True  # the index has its new due time (or none): an old one stands no more
        return self.database.announced(job_id, run_at_ms, route)

    def _index_announced(self, job_id: int, run_at_ms: int | None, route: Route | None) -> bool:
        """Index an announced job; False if the database source must handle it."""
        shard = job_id % self.partitions
        if shard not in self.indexed and shard not in self.rebuilding:
            return False
        try:
            if run_at_ms is None:
                self.index.remove(shard=shard, job_id=job_id)
            elif shard in self.rebuilding:  # rows read before it came are in already
                self.index.add_many([(shard, job_id, run_at_ms)], _routes(job_id, route))
            else:
                added = self.index.add(
                    shard=shard, job_id=job_id, run_at_ms=run_at_ms, route=_index_route(route)
                )
                if added == 1:
                    self.next_take = min(self.next_take, run_at_ms - self._take_lead_ms())
                elif added == 0:
                    self._lost_shards({shard})
        except redis.RedisError as exc:
            self._lost_redis(exc)
        return shard in self.indexed

    # -- state for the dashboard --------------------------------------------------------
    def _record_mode(self) -> None:
        if not self.reachable:
            mode = MODE_UNREACHABLE
        elif self.pending or self.rebuilding:
            mode = MODE_FALLBACK
        else:
            mode = MODE_REDIS
        if mode != self.mode:
            self.mode = mode
            Dispatcher.objects.filter(name=self.name).update(dispatch_mode=mode)


def _index_route(route: Route | None) -> tuple[int, str] | None:
    """An announced job's route as the index keeps it (None: announced without one)."""
    return None if route is None else (route.priority, route.queue)


def _routes(job_id: int, route: Route | None) -> dict[int, tuple[int, str]]:
    indexed = _index_route(route)
    return {} if indexed is None else {job_id: indexed}


def _taken_route(taken: Taken, job_id: int, now: float) -> Route:
    """A taken member's route; one without (removed as it was taken: cancelled) is tried
    as a default job, and its fenced claim finds it no longer due."""
    run_at_ms = taken.run_at_ms.get(job_id, now)
    if job_id not in taken.routes:
        return default_route(run_at_ms)
    priority, queue = taken.routes[job_id]
    return Route(queue, priority, run_at_ms)
