"""How many dispatchers help: the same burst (N no-op jobs due at one instant, at least
once, prefork workers) with 1, 2, 4, 8, 16 and 24 dispatchers, in rounds that alternate
the counts so a shared machine's noise falls on all of them alike.

    python -m bench.dispatchers [--counts 1 2 4 8 16 24] [--size 10000] [--rounds 2]

More than 16 dispatchers need more partitions than the default 16 (an instance without
a partition only waits): the partition count is set to the next power of two at or
above the dispatcher count, never below 16.
"""

from __future__ import annotations

import argparse
import os
import statistics

from bench.burst.__main__ import tempo_burst
from bench.common import table


def partitions_for(dispatchers: int) -> int:
    count = 16
    while count < dispatchers:
        count *= 2
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8, 16, 24])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    results: dict[int, list[dict]] = {count: [] for count in args.counts}
    for _ in range(args.rounds):
        for count in args.counts:
            os.environ["TEMPO_PARTITIONS"] = str(partitions_for(count))
            burst = argparse.Namespace(
                dispatchers=count, workers=args.workers, concurrency=args.concurrency
            )
            results[count].append(tempo_burst(burst, args.size, "at_least_once"))
    base = statistics.median(r["jobs_per_s"] for r in results[args.counts[0]])
    rows = []
    for count, runs in results.items():
        rate = statistics.median(r["jobs_per_s"] for r in runs)
        rows.append(
            {
                "dispatchers": count,
                "partitions": partitions_for(count),
                "jobs_per_s": round(rate),
                "vs_first": f"{rate / base:.2f}x",
                "lag_p50_ms": round(statistics.median(r["lag_p50_ms"] for r in runs)),
                "lag_p99_ms": round(statistics.median(r["lag_p99_ms"] for r in runs)),
                "claim_p50_ms": round(statistics.median(r["claim_p50_ms"] for r in runs)),
                "early": sum(r["started_early"] for r in runs),
                "not_once": sum(r["not_exactly_one_attempt"] for r in runs),
            }
        )
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
