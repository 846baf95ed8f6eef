"""A year in production, compressed: growth of the jobs table with and without retention.

    python -m bench.growth [--members 100000] [--days 60] [--db-prefix tempo_bench_growth]

Each variant runs `bench/growth/simulate.py` (see there for what one simulated day does
and what is measured) in a fresh database of its own, one after the other: `retention`
(batched deletes, 7 days for succeeded jobs, the product's defaults but for batches of
5,000 and no pause: one run stands for a day of 5-minute runs) and `none` (rows kept for
ever; rollups still written). Then `bench/growth/partitions.py` compares removing a day
by batched deletes with dropping a day partition. Results: bench/results/growth.json and
docs/images/growth.png; the numbers are written into docs/BENCHMARKS.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from bench.common import ROOT, BenchDatabase, write_json

PLOT = ROOT / "docs" / "images" / "growth.png"
MEASURES = (
    ("table_mb", "jobs table (MB)"),
    ("index_mb", "its indexes (MB)"),
    ("claim_p99_ms", "claim latency p99 (ms)"),
    ("lag_p99_ms", "probe start lag p99 (ms)"),
    ("overview_p95_ms", "dashboard overview p95 (ms)"),
    ("slice_ms", "planner time per slice (ms)"),
)
LABELS = {"retention": "with retention", "none": "without retention"}
RETENTION_ENV = {
    "TEMPO_RETENTION_BATCH_SIZE": "5000",
    "TEMPO_RETENTION_BATCH_PAUSE_SECONDS": "0",
}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--variants", nargs="+", default=["retention", "none"])
    parser.add_argument("--db-prefix", default="tempo_bench_growth")
    parser.add_argument("--skip-partitions", action="store_true")
    parser.add_argument("--name", default="growth", help="results and plot file name")
    return parser.parse_args()


def run_variant(variant: str, args: argparse.Namespace) -> dict:
    with BenchDatabase(f"{args.db_prefix}_{variant}") as db:
        env = {**os.environ, **RETENTION_ENV, "DATABASE_URL": db.url}
        command = [
            sys.executable, "-m", "bench.growth.simulate", "--variant", variant,
            "--members", str(args.members), "--days", str(args.days),
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.PIPE)
        return json.loads(done.stdout.decode().strip().splitlines()[-1])


def ratios(days: list[dict]) -> dict[str, float]:
    """Day 60 against day 10 (or the last day against the tenth) for every measure."""
    if len(days) < 10:
        return {}
    last, tenth = days[-1], days[9]
    return {key: last[key] / tenth[key] if tenth[key] else float("nan") for key, _ in MEASURES}


def plot(results: dict[str, dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 3, figsize=(13, 7), constrained_layout=True)
    for axis, (key, title) in zip(axes.flat, MEASURES, strict=True):
        for variant, result in results.items():
            days = [d["day"] for d in result["days"]]
            label = LABELS.get(variant, variant)
            axis.plot(days, [d[key] for d in result["days"]], label=label, linewidth=1.4)
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("simulated day")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    axes.flat[0].legend()
    members = next(iter(results.values()))["members"]
    figure.suptitle(f"Growth: a daily task for {members:,} members, per simulated day")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)


def main() -> None:
    args = parse()
    results = {}
    for variant in args.variants:
        print(f"variant {variant}: {args.members:,} members, {args.days} days", flush=True)
        results[variant] = run_variant(variant, args)
        results[variant]["day60_vs_day10"] = ratios(results[variant]["days"])
        print(json.dumps(results[variant]["day60_vs_day10"], indent=1), flush=True)
    plot_path = PLOT.with_name(f"{args.name}.png")
    plot(results, plot_path)
    partitions = None
    if not args.skip_partitions:
        from bench.growth import partitions as partition_bench

        partitions = partition_bench.run(db_prefix=args.db_prefix)
    path = write_json(
        args.name,
        {"command": " ".join(sys.argv), "variants": results, "partitions": partitions},
    )
    print(f"results: {path}; plot: {plot_path}")
    from bench.growth import report

    report.main(args.name)


if __name__ == "__main__":
    main()
