"""The growth bench's tables for docs/BENCHMARKS.md, from bench/results/growth.json:

python -m bench.growth.report
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

from bench.common import RESULTS, table

SHOWN_DAYS = (1, 5, 8, 10, 15, 20, 25, 30, 35, 40, 50, 60)
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
    """Day 60 against day 10, and — as one day's p99 of 40 probe jobs on a shared machine
    is mostly noise — the median of days 56-60 against the median of days 6-10."""
    rows = []
    for name, result in results.items():
        days = result["days"]
        if len(days) < 15:
            continue
        for label, late, early in (
            (f"day {days[-1]['day']} / day 10", [days[-1]], [days[9]]),
            (
                f"median of days {days[-5]['day']}-{days[-1]['day']} / of days 6-10",
                days[-5:],
                days[5:10],
            ),
        ):
            row = {"variant": name, "compared": label}
            for key in RATIOS:
                before = statistics.median(day[key] for day in early)
                after = statistics.median(day[key] for day in late)
                row[key] = f"{after / before:.2f}x" if before else f"{after:.2f} vs 0"
            rows.append(row)
    return table(rows, ["variant", "compared", *RATIOS])


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


LINE = re.compile(
    r"(?P<variant>\w+)\s+day\s+(?P<day>\d+): jobs\s+(?P<job_rows>[\d,]+) rows,"
    r" table\s+(?P<table_mb>[\d.]+) MB \+ indexes\s+(?P<index_mb>[\d.]+) MB,"
    r" claim p99\s+(?P<claim_p99_ms>[\d.]+) ms, lag p99\s+(?P<lag_p99_ms>[\d.]+) ms,"
    r" overview p95\s+(?P<overview_p95_ms>[\d.]+) ms, slice\s+(?P<slice_ms>[\d.]+) ms,"
    r" retention\s+(?P<retention_s>[\d.]+) s, vacuum\s+(?P<vacuum_s>[\d.]+) s"
)


def from_log(path: str, members: int) -> dict[str, dict]:
    """The per-day lines a run printed, as results: for a run stopped before its end."""
    results: dict[str, dict] = {}
    for match in LINE.finditer(Path(path).read_text()):
        fields = match.groupdict()
        variant = fields.pop("variant")
        day = {key: float(value.replace(",", "")) for key, value in fields.items()}
        day["day"], day["job_rows"] = int(day["day"]), int(day["job_rows"])
        results.setdefault(variant, {"members": members, "days": []})["days"].append(day)
    return results


def main(name: str = "growth") -> None:
    data = json.loads((RESULTS / f"{name}.json").read_text())
    for name, result in data["variants"].items():
        print(f"### {name}\n\n{variant_table(result)}\n")
    print(f"### day 60 / day 10\n\n{ratio_table(data['variants'])}\n")
    partitions = data.get("partitions")
    if partitions is None and (RESULTS / "growth-partitions.json").exists():
        partitions = json.loads((RESULTS / "growth-partitions.json").read_text())
    print(f"### partitions\n\n{partition_table(partitions)}")


def main_from_log(path: str, members: int = 100_000) -> None:
    """Tables and the plot from a run's printed lines (`--from-log <file>`)."""
    from bench.growth.__main__ import PLOT, plot

    results = from_log(path, members)
    for name, result in results.items():
        print(f"### {name}\n\n{variant_table(result)}\n")
    print(f"### day 60 / day 10\n\n{ratio_table(results)}\n")
    plot(results, PLOT)
    print(f"plot: {PLOT}")


REBUILT = re.compile(r"(\w+)\s+day\s+(\d+):.*, rebuilt (\d+)")


def main_rebuilds(*logs: str, members: int = 100_000, name: str = "growth-rebuilds") -> None:
    """The runs with index rebuilds, from their printed lines, against the runs of
    growth.json: tables, results/<name>.json and the plot (docs/images/growth.png, or
    <name>.png for another name)."""
    from bench.growth.__main__ import PLOT, plot

    runs: dict[str, dict] = {}
    for path in logs:
        text = Path(path).read_text()
        runs.update(from_log(path, members))
        rebuilt = {(v, int(d)): int(n) for v, d, n in REBUILT.findall(text)}
        for variant, result in runs.items():
            for day in result["days"]:
                day.setdefault("rebuilt", rebuilt.get((variant, day["day"]), 0))
    for variant, result in runs.items():
        print(f"### {variant}\n\n{variant_table(result)}\n")
    print(f"### last day / day 10\n\n{ratio_table(runs)}\n")
    (RESULTS / f"{name}.json").write_text(json.dumps({"variants": runs}, indent=1))
    before = json.loads((RESULTS / "growth.json").read_text())["variants"]
    shown = {"with retention, rebuilds": runs["retention"]}
    if "none" in runs:  # ran beside it, under the same load
        shown["without retention"] = runs["none"]
    path = PLOT if name == "growth-rebuilds" else PLOT.with_name(f"{name}.png")
    if path == PLOT:  # beside the first runs, without rebuilds
        shown["with retention, no rebuilds (2026-11-24)"] = before["retention"]
        shown["without retention (2026-11-24)"] = before["none"]
    plot(shown, path)
    print(f"plot: {path}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--from-log"]:
        main_from_log(sys.argv[2])
    elif sys.argv[1:2] == ["--rebuilds"]:
        main_rebuilds(*sys.argv[2:])
    elif sys.argv[1:2] == ["--final"]:  # --final NAME LOG...: its own results and plot
        main_rebuilds(*sys.argv[3:], name=sys.argv[2])
    else:
        main(*sys.argv[1:])
