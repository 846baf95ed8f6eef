"""The growth bench's tables for docs/BENCHMARKS.md, from bench/results/growth.json:

python -m bench.growth.report
"""

from __future__ import annotations

import json
import sys

from bench.common import RESULTS, table

SHOWN_DAYS = (1, 5, 8, 10, 20, 30, 40, 50, 60)
COLUMNS = [
    "day",
    "job_rows",
    "table_mb",
    "index_mb",
    "wal_mb",
    "claim_p99_ms",
    "lag_p99_ms",
    "overview_p95_ms",
    "slice_ms",
    "retention_s",
    "vacuum_s",
]
RATIOS = ("table_mb", "index_mb", "claim_p99_ms", "lag_p99_ms", "overview_p95_ms", "slice_ms")


def variant_table(result: dict) -> str:
    rows = [day for day in result["days"] if day["day"] in SHOWN_DAYS]
    return table(rows, COLUMNS)


def ratio_table(results: dict[str, dict]) -> str:
    rows = []
    for name, result in results.items():
        days = result["days"]
        if len(days) < 10:
            continue
        last, tenth = days[-1], days[9]
        row = {"variant": name}
        for key in RATIOS:
            row[key] = f"{last[key] / tenth[key]:.2f}x" if tenth[key] else "n/a (0 on day 10)"
        rows.append(row)
    return table(rows, ["variant", *RATIOS])


def partition_table(partitions: dict | None) -> str:
    if not partitions:
        return ""
    keys = [
        "seconds",
        "statements",
        "wal_mb",
        "vacuum_s",
        "vacuum_wal_mb",
        "claim_p50_rest_ms",
        "claim_p99_rest_ms",
        "claim_p50_during_ms",
        "claim_p99_during_ms",
        "claim_max_during_ms",
        "claims_during",
    ]
    rows = [{"way": way, **partitions[way]} for way in ("batched_deletes", "drop_partition")]
    return table(rows, ["way", *keys])


def main(name: str = "growth") -> None:
    data = json.loads((RESULTS / f"{name}.json").read_text())
    for name, result in data["variants"].items():
        print(f"### {name}\n\n{variant_table(result)}\n")
    print(f"### day 60 / day 10\n\n{ratio_table(data['variants'])}\n")
    print(f"### partitions\n\n{partition_table(data.get('partitions'))}")


if __name__ == "__main__":
    main(*sys.argv[1:])
