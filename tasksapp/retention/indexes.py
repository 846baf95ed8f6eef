"""Rebuilding the jobs table's bloated indexes.

Deleting rows frees a B-tree leaf page only when its last entry goes. The keys of most
of the jobs table's indexes only grow (id, run_at, finished_at, the planned keys), so
each page holds the rows of one stretch of time; when some of them are kept longer than
the rest (dead jobs 30 days, succeeded ones 7; a task or handler with its own ages),
those few keep every page of their stretch, and the indexes grow until the longest age
has passed. A retention run compares each index's size with what a fresh build of its
entries would take and rebuilds one that is `REINDEX_BLOAT` times larger with
`REINDEX INDEX CONCURRENTLY`, which takes no lock that claims, starts or finishes wait
for (measured in docs/BENCHMARKS.md, "Growth").
"""

from __future__ import annotations

import math

from tasksapp.engine.db import tempo_connection
from tasksapp.retention.settings import RetentionSettings
from tasksapp.retention.store import IndexStats, retention_store

PAGE_BYTES = 8192
# A leaf page's room for entries: the page header (24 bytes) and B-tree's special space
# (16) taken away, filled to B-tree's default fillfactor of 90 % by a build.
LEAF_ROOM = (PAGE_BYTES - 24 - 16) * 0.90
ENTRY_OVERHEAD = 8  # an index tuple's header (heap pointer and flags)
LINE_POINTER = 4


def _aligned(size: float) -> int:
    return math.ceil(size / 8) * 8


def index_bloat(index: IndexStats) -> float | None:
    """How many times larger the index is than a fresh build of its entries: leaf pages
    of entries of the columns' average width, one internal page per leaf page's worth of
    leaves, and the metapage. None when the catalog has not counted its entries or the
    planner has no statistics of its columns yet. Deduplicated entries take less than
    this: it never overstates the bloat."""
    if index.width is None or index.entries < 0:
        return None
    per_leaf = max(1, int(LEAF_ROOM // (LINE_POINTER + _aligned(ENTRY_OVERHEAD + index.width))))
    leaves = math.ceil(index.entries / per_leaf) or 1
    fresh_pages = leaves + math.ceil(leaves / per_leaf) + 1
    return index.size_bytes / (fresh_pages * PAGE_BYTES)


def indexes_to_rebuild(indexes: list[IndexStats], cfg: RetentionSettings) -> list[str]:
    """The indexes worth rebuilding: at least `REINDEX_MIN_MB` and `REINDEX_BLOAT` times
    their fresh size."""
    if not cfg.reindex_bloat:
        return []
    chosen = []
    for index in indexes:
        bloat = index_bloat(index)
        large = index.size_bytes >= cfg.reindex_min_mb * 2**20
        if large and bloat is not None and bloat >= cfg.reindex_bloat:
            chosen.append(index.name)
    return chosen


def index_rebuild_bloated(*, cfg: RetentionSettings) -> list[str]:
    """Rebuild the jobs table's bloated indexes, one at a time; their names. Not while
    another run rebuilds one, nor inside a transaction (REINDEX CONCURRENTLY cannot run in
    one). First drops what an interrupted rebuild left."""
    store = retention_store()
    if tempo_connection().in_atomic_block or store.rebuilding():
        return []
    store.drop_failed_rebuilds()
    rebuilt = indexes_to_rebuild(store.job_indexes(), cfg)
    for name in rebuilt:
        store.reindex(name)
    return rebuilt
