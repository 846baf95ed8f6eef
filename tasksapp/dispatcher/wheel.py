"""A hierarchical timing wheel (Kafka's design, seed 002), for the dispatcher's timers.

- Level 0 has `size` buckets of `tick_ms`; each higher level's tick is the whole span of
  the level below, created only when a timer needs it. Insert and remove are O(1).
- No empty spinning: every non-empty bucket is entered once in a small heap keyed by its
  expiration (one heap entry per bucket, not per timer), so `next_expiration()` says how
  long the caller may sleep and `pop_due()` visits only buckets that hold timers.
- De-duplication: a key is held at most once; adding it again with the same due time is
  a no-op, with another due time it moves.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterator


class _Level:
    __slots__ = ("tick", "size", "span", "current", "buckets", "expirations", "upper")

    def __init__(self, tick: int, size: int, start: int) -> None:
        self.tick = tick
        self.size = size
        self.span = tick * size
        self.current = start - start % tick
        self.buckets: list[dict[Hashable, int]] = [{} for _ in range(size)]
        self.expirations = [-1] * size
        self.upper: _Level | None = None

    def advance(self, time_ms: int) -> None:
        if time_ms >= self.current + self.tick:
            self.current = time_ms - time_ms % self.tick
            if self.upper is not None:
                self.upper.advance(self.current)


class TimingWheel:
    def __init__(self, *, tick_ms: int = 1, size: int = 256, start_ms: int = 0) -> None:
        if tick_ms < 1 or size < 2:
            raise ValueError("tick_ms must be >= 1 and size >= 2")
        self._root = _Level(tick_ms, size, start_ms)
        self._heap: list[tuple[int, int, _Level, int]] = []  # (expiration, seq, level, index)
        self._seq = 0
        self._where: dict[Hashable, tuple[_Level, int, int]] = {}  # key -> (level, index, due)
        self._expired: dict[Hashable, int] = {}  # due already when added or cascaded

    def __len__(self) -> int:
        return len(self._where) + len(self._expired)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._where or key in self._expired

    def keys(self) -> Iterator[Hashable]:
        yield from list(self._where)
        yield from list(self._expired)

    def add(self, key: Hashable, due_ms: int) -> bool:
        """Hold `key` until `due_ms`. Returns False if it was already held for that time."""
        held = self._where.get(key)
        if held is not None and held[2] == due_ms or self._expired.get(key) == due_ms:
            return False
        self.remove(key)
        self._place(key, due_ms)
        return True

    def remove(self, key: Hashable) -> bool:
        if key in self._expired:
            del self._expired[key]
            return True
        held = self._where.pop(key, None)
        if held is None:
            return False
        level, index, _ = held
        del level.buckets[index][key]
        return True

    def remove_where(self, predicate: Callable[[Hashable], bool]) -> int:
        doomed = [key for key in self.keys() if predicate(key)]
        for key in doomed:
            self.remove(key)
        return len(doomed)

    def next_expiration(self) -> int | None:
        """Earliest time (ms) at which `pop_due` may return something or must cascade."""
        if self._expired:
            return self._root.current
        while self._heap:
            expiration, _, level, index = self._heap[0]
            if level.expirations[index] == expiration and level.buckets[index]:
                return expiration
            heapq.heappop(self._heap)  # stale entry: bucket emptied or reused
        return None

    def pop_due(self, now_ms: int) -> list[Hashable]:
        """Remove and return every key whose bucket has expired by `now_ms`."""
        due = list(self._expired)
        self._expired.clear()
        while self._heap and self._heap[0][0] <= now_ms:
            expiration, _, level, index = heapq.heappop(self._heap)
            if level.expirations[index] != expiration:
                continue
            bucket = level.buckets[index]
            level.buckets[index] = {}
            level.expirations[index] = -1
            self._root.advance(expiration)
            for key, key_due in bucket.items():
                del self._where[key]
                self._place(key, key_due)
            due.extend(self._expired)
            self._expired.clear()
        self._root.advance(now_ms)
        return due

    def _place(self, key: Hashable, due_ms: int) -> None:
        level = self._root
        while True:
            if due_ms < level.current + level.tick:
                self._expired[key] = due_ms
                return
            if due_ms < level.current + level.span:
                self._put(level, key, due_ms)
                return
            if level.upper is None:
                level.upper = _Level(level.span, level.size, level.current)
            level = level.upper

    def _put(self, level: _Level, key: Hashable, due_ms: int) -> None:
        virtual = due_ms // level.tick
        index = virtual % level.size
        level.buckets[index][key] = due_ms
        self._where[key] = (level, index, due_ms)
        expiration = virtual * level.tick
        if level.expirations[index] != expiration:
            level.expirations[index] = expiration
            self._seq += 1
            heapq.heappush(self._heap, (expiration, self._seq, level, index))
