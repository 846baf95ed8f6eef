"""Partitions on the multi-host rig, repeated: how long until a cut-off host's partitions
are taken over, how many jobs start late and by how much, how long it takes to rejoin.

    python -m bench.cluster [--runs 3]

Each run builds a fresh rig (tests/cluster/rig.py: three network namespaces, a
PostgreSQL and a Redis of its own) and runs one scenario of tests/cluster/scenarios.py,
which also checks that nothing ran twice, was lost or started early. Needs root.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from tests.cluster.rig import Rig, rig_unavailable
from tests.cluster.scenarios import Figures, postgres_cut, redis_cut

SCENARIOS = {"postgres cut from one host": postgres_cut, "redis cut from one host": redis_cut}


def run(scenario, runs: int) -> list[Figures]:
    figures = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="tempo-rig-") as logs:
            rig = Rig(hosts=3, logs=Path(logs)).start()
            try:
                figures.append(scenario(rig))
            finally:
                rig.stop()
    return figures


def spread(values: list[float], unit: str = " s") -> str:
    return f"{statistics.median(values):.1f}{unit} (max {max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    reason = rig_unavailable()
    if reason:
        raise SystemExit(f"no rig here: {reason}")
    print(
        "| scenario | taken over after | stream jobs > 1 s late (of 120) | worst lag"
        " | rejoined after |"
    )
    print("|---|---|---|---|---|")
    for name, scenario in SCENARIOS.items():
        figures = run(scenario, args.runs)
        print(
            f"| {name} | {spread([f.takeover_s for f in figures])}"
            f" | {statistics.median([f.late_jobs for f in figures]):.0f}"
            f" (max {max(f.late_jobs for f in figures)})"
            f" | {spread([f.worst_lag_s for f in figures])}"
            f" | {spread([f.rejoin_s for f in figures])} |"
        )


if __name__ == "__main__":
    main()
