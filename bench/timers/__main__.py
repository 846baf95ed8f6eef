"""Timing wheel vs heap: insert N random timers, then expire them all.

    python -m bench.timers [--timers 1000000] [--seed 1] [--horizon-ms 600000] [--repeats 3]

Two candidates, side by side in one run, fed the same timers:

- ``wheel``: the dispatcher's hierarchical TimingWheel (tick 1 ms, 256 buckets per level);
- ``heap``: the classic delay queue, one binary heap of ``(due, seq, key)`` entries.

Both are driven the way the dispatcher drives its wheel: sleep until ``next_expiration()``,
then ``pop_due(now)``, until nothing is left. Timings come from passes without tracemalloc;
peak memory from separate traced passes. Every timed pass is checked: all N keys popped,
each once, none before its due time.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from pathlib import Path

from tqdm import tqdm

from bench.common import machine
from tasksapp.engine.dispatcher.wheel import TimingWheel

RESULTS = Path(__file__).resolve().parent.parent / "results" / "timers.json"
START_MS = 1_700_000_000_000  # an epoch time in ms, as the dispatcher uses
CHUNK = 1 << 16  # progress is reported every CHUNK timers


class HeapDelayQueue:
    """A delay queue on a binary heap of ``(due, seq, key)``; seq keeps equal dues in order."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, key: Hashable, due_ms: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due_ms, self._seq, key))

    def next_expiration(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> list[Hashable]:
        heap = self._heap
        due = []
        while heap and heap[0][0] <= now_ms:
            due.append(heapq.heappop(heap)[2])
        return due


CANDIDATES: dict[str, Callable[[], object]] = {
    "wheel": lambda: TimingWheel(tick_ms=1, size=256, start_ms=START_MS),
    "heap": HeapDelayQueue,
}


def insert(queue, keys: list[int], dues: list[int], bar: tqdm) -> None:
    add = queue.add
    for start in range(0, len(keys), CHUNK):
        for key, due in zip(keys[start : start + CHUNK], dues[start : start + CHUNK], strict=True):
            add(key, due)
        bar.update(len(keys[start : start + CHUNK]))


def expire(queue, bar: tqdm, batches: list | None) -> tuple[int, int]:
    """Sleep-and-pop until empty. Returns (keys popped, wake-ups)."""
    next_expiration = queue.next_expiration
    pop_due = queue.pop_due
    popped = wakeups = 0
    mark = CHUNK
    while (now := next_expiration()) is not None:
        wakeups += 1
        keys = pop_due(now)
        if keys:
            if batches is not None:
                batches.append((now, keys))
            popped += len(keys)
            if popped >= mark:
                bar.update(CHUNK)
                mark += CHUNK
    bar.update(popped - (mark - CHUNK))
    return popped, wakeups


def verify(name: str, batches: list, dues: list[int]) -> int:
    """All keys popped, each once, none before due. Returns the worst lateness in ms."""
    seen = bytearray(len(dues))
    count = worst = 0
    for now, keys in batches:
        for key in keys:
            if seen[key]:
                raise AssertionError(f"{name}: key {key} popped twice")
            seen[key] = 1
            late = now - dues[key]
            if late < 0:
                raise AssertionError(f"{name}: key {key} popped {-late} ms before its due time")
            worst = max(worst, late)
        count += len(keys)
    if count != len(dues):
        raise AssertionError(f"{name}: popped {count} keys out of {len(dues)}")
    return worst


def timed_pass(name: str, keys: list[int], dues: list[int], bar: tqdm) -> dict:
    bar.set_postfix_str(f"{name}: timing")
    gc.collect()
    queue = CANDIDATES[name]()
    batches: list = []
    t0 = time.perf_counter()
    insert(queue, keys, dues, bar)
    t1 = time.perf_counter()
    popped, wakeups = expire(queue, bar, batches)
    t2 = time.perf_counter()
    worst_late = verify(name, batches, dues)
    assert len(queue) == 0 and popped == len(keys)
    return {
        "insert_s": t1 - t0,
        "expire_s": t2 - t1,
        "wakeups": wakeups,
        "worst_lateness_ms": worst_late,
    }


def memory_pass(name: str, keys: list[int], dues: list[int], bar: tqdm) -> dict:
    bar.set_postfix_str(f"{name}: tracing memory")
    gc.collect()
    tracemalloc.start()
    queue = CANDIDATES[name]()
    insert(queue, keys, dues, bar)
    held, _ = tracemalloc.get_traced_memory()
    popped, _ = expire(queue, bar, None)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert popped == len(keys)
    return {"held_after_insert_bytes": held, "peak_bytes": peak}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.timers", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--timers", type=int, default=1_000_000, help="timers per pass")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--horizon-ms", type=int, default=600_000, help="due times spread")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per candidate")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    n = args.timers

    rng = random.Random(args.seed)
    keys = list(range(n))
    dues = [START_MS + rng.randrange(1, args.horizon_ms + 1) for _ in keys]
    names = list(CANDIDATES)

    timings: dict[str, list[dict]] = {name: [] for name in names}
    memory: dict[str, dict] = {}
    total = 2 * n * len(names) * (args.repeats + 1)
    with tqdm(total=total, unit="timer", unit_scale=True, dynamic_ncols=True) as bar:
        for repeat in range(args.repeats):
            # Alternate the order so that neither candidate always runs on a warmer machine.
            for name in names if repeat % 2 == 0 else reversed(names):
                timings[name].append(timed_pass(name, keys, dues, bar))
        for name in names:
            memory[name] = memory_pass(name, keys, dues, bar)

    results: dict[str, dict] = {}
    for name in names:
        runs = timings[name]
        insert_s = min(run["insert_s"] for run in runs)
        expire_s = min(run["expire_s"] for run in runs)
        total_s = min(run["insert_s"] + run["expire_s"] for run in runs)
        results[name] = {
            "insert_ops_per_s": n / insert_s,
            "expire_ops_per_s": n / expire_s,
            "total_ops_per_s": n / total_s,
            "insert_s": insert_s,
            "expire_s": expire_s,
            "total_s": total_s,
            "total_s_median": statistics.median(r["insert_s"] + r["expire_s"] for r in runs),
            "wakeups": runs[0]["wakeups"],
            "worst_lateness_ms": max(run["worst_lateness_ms"] for run in runs),
            **memory[name],
            "runs": runs,
        }
    wheel, heap = results["wheel"], results["heap"]
    ratio = {
        "insert_ops_per_s": wheel["insert_ops_per_s"] / heap["insert_ops_per_s"],
        "expire_ops_per_s": wheel["expire_ops_per_s"] / heap["expire_ops_per_s"],
        "total_ops_per_s": wheel["total_ops_per_s"] / heap["total_ops_per_s"],
        "peak_bytes": wheel["peak_bytes"] / heap["peak_bytes"],
    }

    header = (
        "| candidate | insert ops/s | expire ops/s | insert+expire ops/s "
        "| peak memory (MiB) | wake-ups |"
    )
    lines = [header, "|---|--:|--:|--:|--:|--:|"]
    for name in names:
        r = results[name]
        lines.append(
            f"| {name} | {r['insert_ops_per_s']:,.0f} | {r['expire_ops_per_s']:,.0f} "
            f"| {r['total_ops_per_s']:,.0f} | {r['peak_bytes'] / 2**20:,.1f} "
            f"| {r['wakeups']:,} |"
        )
    lines.append(
        f"| wheel / heap | {ratio['insert_ops_per_s']:.2f}x | {ratio['expire_ops_per_s']:.2f}x "
        f"| {ratio['total_ops_per_s']:.2f}x | {ratio['peak_bytes']:.2f}x | |"
    )
    table = "\n".join(lines)
    print(
        f"{n:,} timers due uniformly over the next {args.horizon_ms:,} ms (seed {args.seed}); "
        f"best of {args.repeats} timed passes; memory from separate tracemalloc passes."
    )
    print(
        "All keys popped once, none early; worst lateness (ms): "
        + ", ".join(f"{name} {results[name]['worst_lateness_ms']}" for name in names)
    )
    print(table)

    report = {
        "bench": "timers",
        "command": " ".join(["python -m bench.timers", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "timers": n,
        "seed": args.seed,
        "horizon_ms": args.horizon_ms,
        "repeats": args.repeats,
        "results": results,
        "ratio_wheel_over_heap": ratio,
        "table": table,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
