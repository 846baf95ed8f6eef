"""The exercise's extended test: how many instances score best?

    python -m bench.practice --sweep 1 10 --duration 120 --private-postgres

One scoring run per instance count (the exercise's second test: no kills; no naive demo),
each on a fresh database, the instance count rising; then cost and efficient against the
instance count, with the ideal's efficient beside Tempo's, into docs/images/.
"""

from __future__ import annotations

import argparse
import sys

from bench.common import ROOT, table, write_json

COLUMNS = [
    "instances",
    "jobs",
    "pass",
    "completed",
    "executed_twice",
    "started_early",
    "late",
    "list_queries",
    "failed_claims",
    "cost",
    "delay_avg_ms",
    "delay_stdev_ms",
    "efficient",
    "ideal_efficient",
    "distance_ms",
    "load_before",
    "load_after",
]


def sweep(args: argparse.Namespace, *, server: str) -> None:
    from bench.practice.__main__ import run_once

    first, last = args.sweep
    rows = []
    for count in range(first, last + 1):
        options = argparse.Namespace(
            **{**vars(args), "instances": count, "no_kills": True, "no_baseline": True}
        )
        run = run_once(options, server=server)
        rows.append(sweep_row(count, run))
        print(table(rows[-1:], COLUMNS), file=sys.stderr)
    print(table(rows, COLUMNS))
    image = ROOT / "docs" / "images" / "practice_sweep.png"
    plot_sweep(rows, image, duration=args.duration)
    path = write_json(
        "practice_sweep", {"args": vars(args), "rows": rows, "plot": str(image.relative_to(ROOT))}
    )
    print(f"wrote {path} and {image}", file=sys.stderr)


def sweep_row(count: int, run: dict) -> dict:
    tempo = run["results"][0]
    load = run["load_average"]
    return {
        "instances": count,
        "jobs": tempo["jobs"],
        "pass": tempo["pass"],
        "completed": tempo["completed"],
        "executed_twice": tempo["executed_twice"],
        "started_early": tempo["started_early"],
        "late": tempo["late"],
        "list_queries": tempo["list_queries"],
        "failed_claims": tempo["failed_claims"],
        "cost": tempo["cost"],
        "delay_avg_ms": tempo["delay_avg_ms"],
        "delay_stdev_ms": tempo["delay_stdev_ms"],
        "efficient": tempo["efficient"],
        "ideal_efficient": run["ideal"]["efficient"],
        "distance_ms": run["distance_ms"],
        "load_before": round(load["before"][0], 2),
        "load_after": round(load["after"][0], 2),
    }


def plot_sweep(rows: list[dict], path, *, duration: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [r["instances"] for r in rows]
    fig, (cost, precision) = plt.subplots(1, 2, figsize=(11, 4))
    cost.plot(counts, [r["cost"] for r in rows], marker="o", color="#2b7bba")
    cost.set_title(f"cost score ({duration:g} s runs)")
    cost.set_xlabel("instances (dispatcher + worker with 5 slots)")
    cost.set_ylim(bottom=0)
    precision.plot(counts, [r["efficient"] for r in rows], marker="o", label="Tempo")
    precision.plot(
        counts, [r["ideal_efficient"] for r in rows], marker="x", label="ideal (zero overhead)"
    )
    precision.set_title("efficient score: avg + stdev of ExecuteAt − RunAt (ms)")
    precision.set_xlabel("instances")
    precision.legend()
    for axes in (cost, precision):
        axes.set_xticks(counts)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
