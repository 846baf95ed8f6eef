"""A hierarchical timing wheel (Kafka's design), for the dispatcher's timers.

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
from collections.abc import Callable, Hashable, Iterable, Iterator

Bucket = dict[Hashable, int]  # key -> due time (ms)


class _Level:
    __slots__ = ("tick", "size", "span", "current", "end", "buckets", "expirations", "upper")

    def __init__(self, tick: int, size: int, start: int) -> None:
        self.tick = tick
        self.size = size
        self.span = tick * size
        self.current = start - start % tick
        self.end = self.current + self.span  # timers due from here on go to a higher level
        self.buckets: list[Bucket] = [{} for _ in range(size)]
        self.expirations = [-1] * size
        self.upper: _Level | None = None

    def advance(self, time_ms: int) -> None:
        if time_ms >= self.current + self.tick:
            self.current = time_ms - time_ms % self.tick
            self.end = self.current + self.span
            if self.upper is not None:
                self.upper.advance(self.current)


class TimingWheel:
    def __init__(self, *, tick_ms: int = 1, size: int = 256, start_ms: int = 0) -> None:
        if tick_ms < 1 or size < 2:
            raise ValueError("tick_ms must be >= 1 and size >= 2")
        self._root = _Level(tick_ms, size, start_ms)
        self._heap: list[tuple[int, int, _Level, int]] = []  # (expiration, seq, level, index)
        self._seq = 0
        self._expired: Bucket = {}  # due already when added or cascaded
        self._where: dict[Hashable, Bucket] = {}  # key -> the bucket (or _expired) holding it

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._where

    def keys(self) -> Iterator[Hashable]:
        yield from list(self._where)

    def add(self, key: Hashable, due_ms: int) -> bool:
        """Hold `key` until `due_ms`. Returns False if it was already held for that time."""
        bucket = self._where.get(key)
        if bucket is not None:
            if bucket[key] == due_ms:
                return False
            del bucket[key]  # `_place` repoints `_where`
        self._place(((key, due_ms),))
        return True

    def remove(self, key: Hashable) -> bool:
        bucket = self._where.pop(key, None)
        if bucket is None:
            return False
        del bucket[key]
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
        heap = self._heap
        while heap:
            expiration, _, level, index = heap[0]
            if level.expirations[index] == expiration:
                if level.buckets[index]:
                    return expiration
                level.expirations[index] = -1  # emptied by remove: the next add must re-enter it
            heapq.heappop(heap)  # stale entry: bucket emptied or reused
        return None

    def pop_due(self, now_ms: int) -> list[Hashable]:
        """Remove and return every key whose bucket has expired by `now_ms`."""
        root, heap, where = self._root, self._heap, self._where
        due: list[Hashable] = []
        self._take_expired(due)
        while heap and heap[0][0] <= now_ms:
            expiration, _, level, index = heapq.heappop(heap)
            if level.expirations[index] != expiration:
                continue
            bucket = level.buckets[index]
            level.buckets[index] = {}
            level.expirations[index] = -1
            root.advance(expiration)
            if level is root:
                # A root bucket spans one tick, which has just started: all of it is due.
                for key in bucket:
                    del where[key]
                due.extend(bucket)
            else:
                # Cascade: each key moves down to a finer level, or is due now.
                self._place(bucket.items())
                self._take_expired(due)
        root.advance(now_ms)
        return due

    def _take_expired(self, due: list[Hashable]) -> None:
        if self._expired:
            for key in self._expired:
                del self._where[key]
            due.extend(self._expired)
            self._expired.clear()

    def _place(self, timers: Iterable[tuple[Hashable, int]]) -> None:
        """File each (key, due) in its bucket, or as expired if its time has come."""
        root, where, expired, heap = self._root, self._where, self._expired, self._heap
        due_before = root.current + root.tick
        for key, due_ms in timers:
            if due_ms < due_before:
                expired[key] = due_ms
                where[key] = expired
                continue
            # Beyond the root's span, a timer goes to the first level whose span reaches
            # it; it is never due there, since a level's tick is the span of the one below.
            level = root
            while due_ms >= level.end:
                if level.upper is None:
                    level.upper = _Level(level.span, level.size, level.current)
                level = level.upper
            virtual = due_ms // level.tick
            index = virtual % level.size
            bucket = level.buckets[index]
            bucket[key] = due_ms
            where[key] = bucket
            expiration = virtual * level.tick
            if level.expirations[index] != expiration:
                level.expirations[index] = expiration
                self._seq += 1
                heapq.heappush(heap, (expiration, self._seq, level, index))
