"""The Redis due index (sorted sets scored by run time): which jobs are due, without
reading the jobs table.

PostgreSQL stays the truth; this index only says which ids to try to claim. Keys, under
a prefix (`TEMPO_INDEX_PREFIX`, default "<queue>:"), one shard per partition (id mod 16):

- `due:{p}`      sorted set, member = job id, score = run_at (ms)
- `inflight:{p}` sorted set, member = job id, score = the take's lease deadline (ms)
- `route:{p}`    hash, job id → "<priority>:<queue>": each member's route, written
  before the member and removed with it, so a dispatcher routes what it takes (priority,
  pause, limits) without reading the jobs table
- `shard:{p}`    hash {gen, horizon}: the shard is complete for generation `gen` up to
  `horizon` ms (every scheduled job of the partition due before it is in `due:{p}`)
- `generation:routed` a random id, created by the first instance that finds it missing
  (named anew when routes were added: an index without them is rebuilt, not read)
- `return-lock`  held (with expiry) by the one instance returning expired takes

A take moves members from `due` to `inflight` in one Lua script, instead of negating
their score as the sorted-set scheduler it follows does: `inflight` is scored by the
lease deadline, so expired takes are found with one range query (negated scores would
have to be scanned, and could not tell a stuck take from a slow one without a second
timestamp). The same script refuses a shard whose marker is missing or belongs to
another generation: an emptied Redis (FLUSHALL, restart without persistence, failover)
is detected by the very command that would have read it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import redis

# Moves `ids` from sorted set `from` to `to` with `score`, in chunks: unpack() is
# limited by Lua's stack (about 8,000 values).
MOVE = """
local function move(from, to, ids, score)
  for i = 1, #ids, 1000 do
    local chunk, args = {}, {}
    for j = i, math.min(i + 999, #ids) do
      chunk[#chunk + 1] = ids[j]
      args[#args + 1] = score
      args[#args + 1] = ids[j]
    end
    redis.call('ZREM', from, unpack(chunk))
    redis.call('ZADD', to, unpack(args))
  end
end
"""

# KEYS: generation, then per shard: due, inflight, marker. ARGV: until_ms, deadline_ms,
# limit (per call). Returns per shard {status, next_score_or_-1, id, score, id, score...};
# status 1 = served, 0 = not built for this generation (the caller falls back).
TAKE = (
    MOVE
    + """
local gen = redis.call('GET', KEYS[1])
local until_ms, deadline, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local out = {}
for i = 2, #KEYS, 3 do
  local due, inflight, marker = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  if not gen or redis.call('HGET', marker, 'gen') ~= gen then
    out[#out + 1] = {0, -1}
  else
    local ids, scored = {}, {}
    local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
    if limit > 0 and head[2] and tonumber(head[2]) <= until_ms then
      scored = redis.call('ZRANGEBYSCORE', due, '-inf', until_ms, 'WITHSCORES', 'LIMIT', 0, limit)
      for j = 1, #scored, 2 do ids[#ids + 1] = scored[j] end
      limit = limit - #ids
      move(due, inflight, ids, deadline)
      head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
    end
    local entry = {1, head[2] and math.floor(tonumber(head[2])) or -1}
    for _, value in ipairs(scored) do entry[#entry + 1] = value end
    out[#out + 1] = entry
  end
end
return out
"""
)

# KEYS: generation, due, marker, routes. ARGV: score, id, route ("": none). Adds the id
# (and its route) if the shard is built for the current generation and the score is
# below its horizon. Returns 1 added, 2 beyond the horizon (the next sync reads it),
# 0 shard not built.
ADD = """
local gen = redis.call('GET', KEYS[1])
local marker = redis.call('HMGET', KEYS[3], 'gen', 'horizon')
if not gen or marker[1] ~= gen then return 0 end
if tonumber(ARGV[1]) >= tonumber(marker[2]) then return 2 end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[4], ARGV[2], ARGV[3]) end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return 1
"""

# KEYS: generation, marker. ARGV: gen, horizon. Marks a rebuilt shard as complete, only
# if the generation it was rebuilt for is still the current one.
MARK_BUILT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'gen', ARGV[1], 'horizon', ARGV[2])
return 1
"""

# KEYS: lock, then the inflight and due key of every shard. ARGV: owner, now_ms,
# lock_ms, limit. The instance that gets the lock (with expiry: nobody repeats the work
# before it lapses) moves takes whose lease passed back to `due`, due at once.
RETURN_EXPIRED = (
    MOVE
    + """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then return -1 end
local returned = 0
for i = 2, #KEYS, 2 do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', ARGV[2], 'LIMIT', 0, ARGV[4])
  move(KEYS[i], KEYS[i + 1], ids, ARGV[2])
  returned = returned + #ids
end
return returned
"""
)

GENERATION = "generation:routed"
CHUNK = 5000  # members per ZADD/ZREM/HMGET command
MAX_TAKE = 16_000  # members per take or return: one claim statement, Redis busy ~20 ms


Route = tuple[int, str]  # (priority, queue)


@dataclass
class Taken:
    """One take: ids per shard, shards found unbuilt, the earliest remaining score, and
    the routes of the ids taken (an id without one was removed meanwhile)."""

    ids: dict[int, list[int]] = field(default_factory=dict)
    unbuilt: list[int] = field(default_factory=list)
    next_ms: int | None = None
    routes: dict[int, Route] = field(default_factory=dict)
    run_at_ms: dict[int, float] = field(default_factory=dict)  # each id's score

    def all_ids(self) -> list[int]:
        return [job_id for ids in self.ids.values() for job_id in ids]


def _route_text(route: Route) -> str:
    return f"{route[0]}:{route[1]}"


def _route_of(text: bytes) -> Route:
    priority, _, queue = text.decode().partition(":")
    return int(priority), queue


class RedisIndex:
    def __init__(self, *, url: str, prefix: str, timeout: float = 1.0) -> None:
        self.prefix = prefix
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self._take = self.client.register_script(TAKE)
        self._add = self.client.register_script(ADD)
        self._mark = self.client.register_script(MARK_BUILT)
        self._return = self.client.register_script(RETURN_EXPIRED)

    # -- keys -------------------------------------------------------------------------
    def key(self, name: str, shard: int | None = None) -> str:
        return f"{self.prefix}{name}" if shard is None else f"{self.prefix}{name}:{shard}"

    # -- generation and shard markers ---------------------------------------------------
    def generation(self) -> str:
        """The current generation; a new one if the index was lost (or never built)."""
        key = self.key(GENERATION)
        self.client.set(key, uuid.uuid4().hex, nx=True)
        value = self.client.get(key)
        return value.decode() if value is not None else self.generation()

    def begin_rebuild(self, shard: int) -> None:
        """Forget a shard's marker and members: it is served from the database until
        `mark_built`."""
        self.client.delete(
            self.key("shard", shard), self.key("due", shard), self.key("route", shard)
        )

    def mark_built(self, shard: int, *, generation: str, horizon_ms: int) -> bool:
        keys = [self.key(GENERATION), self.key("shard", shard)]
        return bool(self._mark(keys=keys, args=[generation, int(horizon_ms)]))

    def horizons(self, shards: list[int]) -> dict[int, int | None]:
        """Each shard's horizon, or None if it is not built for the current generation."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.key(GENERATION))
        for shard in shards:
            pipe.hmget(self.key("shard", shard), "gen", "horizon")
        gen, *markers = pipe.execute()
        return {
            shard: int(marker[1]) if gen is not None and marker[0] == gen else None
            for shard, marker in zip(shards, markers, strict=True)
        }

    def set_horizon(self, shards: list[int], horizon_ms: int) -> None:
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            pipe.hset(self.key("shard", shard), "horizon", int(horizon_ms))
        pipe.execute()

    # -- members ------------------------------------------------------------------------
    def add(self, *, shard: int, job_id: int, run_at_ms: int, route: Route | None = None) -> int:
        """Index one announced job: 1 added, 2 beyond the horizon, 0 shard not built."""
        keys = [self.key(GENERATION), self.key("due", shard), self.key("shard", shard)]
        keys.append(self.key("route", shard))
        text = "" if route is None else _route_text(route)
        return int(self._add(keys=keys, args=[int(run_at_ms), job_id, text]))

    def add_many(
        self, rows: list[tuple[int, int, int]], routes: dict[int, Route] | None = None
    ) -> None:
        """(shard, job id, run_at ms) rows, unconditionally (a rebuild or a sync), with
        the routes of their ids."""
        by_shard: dict[int, dict[str, int]] = {}
        for shard, job_id, run_at_ms in rows:
            by_shard.setdefault(shard, {})[str(job_id)] = int(run_at_ms)
        pipe = self.client.pipeline(transaction=False)
        for shard, mapping in by_shard.items():
            items = list(mapping.items())
            for i in range(0, len(items), CHUNK):
                chunk = items[i : i + CHUNK]
                if routes:
                    texts = {k: _route_text(routes[int(k)]) for k, _ in chunk if int(k) in routes}
                    if texts:
                        pipe.hset(self.key("route", shard), mapping=texts)
                pipe.zadd(self.key("due", shard), dict(chunk))
        pipe.execute()

    def remove(self, *, shard: int, job_id: int) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self.key("due", shard), job_id)
        pipe.zrem(self.key("inflight", shard), job_id)
        pipe.hdel(self.key("route", shard), job_id)
        pipe.execute()

    def take(self, *, shards: list[int], until_ms: int, lease_ms: int, limit: int) -> Taken:
        """Atomically move members due by `until_ms` (at most `limit`) to in-flight."""
        limit = min(limit, MAX_TAKE)
        keys = [self.key(GENERATION)]
        for shard in shards:
            keys += [self.key("due", shard), self.key("inflight", shard), self.key("shard", shard)]
        rows = self._take(keys=keys, args=[int(until_ms), int(until_ms) + lease_ms, limit])
        taken = Taken()
        for shard, (status, next_score, *scored) in zip(shards, rows, strict=True):
            if not status:
                taken.unbuilt.append(shard)
                continue
            if scored:
                ids = [int(i) for i in scored[::2]]
                taken.ids[shard] = ids
                taken.run_at_ms.update(zip(ids, map(float, scored[1::2]), strict=True))
            if next_score >= 0:
                taken.next_ms = min(taken.next_ms or next_score, next_score)
        self._read_routes(taken)
        return taken

    def _read_routes(self, taken: Taken) -> None:
        pipe = self.client.pipeline(transaction=False)
        asked: list[int] = []
        for shard, ids in taken.ids.items():
            for i in range(0, len(ids), CHUNK):
                pipe.hmget(self.key("route", shard), ids[i : i + CHUNK])
                asked += ids[i : i + CHUNK]
        texts = [text for chunk in pipe.execute() for text in chunk]
        taken.routes = {
            job_id: _route_of(text)
            for job_id, text in zip(asked, texts, strict=True)
            if text is not None
        }

    def ack(self, taken: Taken) -> None:
        """The takes are held by their dispatcher (or were tried): forget them."""
        pipe = self.client.pipeline(transaction=False)
        for shard, ids in taken.ids.items():
            for i in range(0, len(ids), CHUNK):
                pipe.zrem(self.key("inflight", shard), *ids[i : i + CHUNK])
                pipe.hdel(self.key("route", shard), *ids[i : i + CHUNK])
        pipe.execute()

    def return_expired(
        self, *, partitions: int, owner: str, now_ms: int, lock_ms: int, limit: int = MAX_TAKE
    ) -> int:
        """Return expired takes of every shard if no other instance did within `lock_ms`;
        -1 if another holds the lock."""
        keys = [self.key("return-lock")]
        for shard in range(partitions):
            keys += [self.key("inflight", shard), self.key("due", shard)]
        return int(self._return(keys=keys, args=[owner, int(now_ms), int(lock_ms), limit]))
