"""Parameterised graph tasks: grounding and planning 20 actions over 20 objects.

    python -m bench.graphs.grounding_bench [--objects 20] [--actions 20] [--repeats 5]

The domain is a chain per object: action ``a<i>(x: item)`` requires ``p<i-1>(x)`` (the
first one ``start``) and provides ``p<i>(x)``. Two jobs: one wants the last proposition
of every object (all objects × actions ground tasks in the plan), one wants it for one
object only (the plan keeps that object's chain alone). Each is timed three ways in the
same run: the uncached planner on the parameterised tasks (grounding included), on the
same ground tasks declared by hand, and ``graph_plan``'s second call (the cache).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import machine
from tasksapp.graphs.grounding import bindings
from tasksapp.graphs.planner import graph_plan, plan_tasks
from tasksapp.graphs.registry import Registry, task_spec

RESULTS = Path(__file__).resolve().parent.parent / "results" / "graphs_grounding.json"


def _noop(inputs: dict) -> dict:
    return {}


def chain_registry(actions: int) -> Registry:
    registry = Registry()
    for i in range(actions):
        needs = "start" if i == 0 else f"p{i - 1}(x)"
        registry.register(
            task_spec(
                _noop,
                name=f"a{i:02d}",
                params={"x": "item"},
                requires=[needs],
                provides=[f"p{i}(x)"],
            )
        )
    return registry


def by_hand(registry: Registry, objects: list[str]) -> list:
    """The same ground tasks, declared one by one (what grounding saves writing)."""
    ground = []
    for spec in registry:
        for binding in bindings(spec.params, {"item": tuple(objects)}):
            ground.append(spec.ground(binding))
    return ground


def timed(run, repeats: int) -> list[float]:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        plan = run()
        timings.append(time.perf_counter() - started)
    return timings, plan


def measure(objects: int, actions: int, *, wanted: int, repeats: int) -> dict:
    registry = chain_registry(actions)
    names = [f"o{n:02d}" for n in range(objects)]
    has = {"start": 1, "item": names}
    wants = [f"p{actions - 1}({name})" for name in names[:wanted]]
    ground = by_hand(registry, names)
    grounded, plan = timed(lambda: plan_tasks(tasks=registry, has=has, wants=wants), repeats)
    hand, hand_plan = timed(lambda: plan_tasks(tasks=ground, has=has, wants=wants), repeats)
    assert hand_plan.layers == plan.layers
    graph_plan(has=has, wants=wants, registry=registry)
    cached, _ = timed(lambda: graph_plan(has=has, wants=wants, registry=registry), repeats)
    return {
        "objects": objects,
        "actions": actions,
        "ground_tasks": len(ground),
        "wanted_objects": wanted,
        "plan_tasks": len(plan.tasks),
        "plan_layers": len(plan.layers),
        "grounded_median_s": statistics.median(grounded),
        "grounded_best_s": min(grounded),
        "by_hand_median_s": statistics.median(hand),
        "cached_median_s": statistics.median(cached),
        "ratio_grounded_to_by_hand": statistics.median(grounded) / statistics.median(hand),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| objects × actions | ground tasks | wanted objects | tasks in plan | layers "
        "| grounded + planned, median (ms) | same ground tasks by hand (ms) | ratio "
        "| cached (ms) |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['objects']} × {r['actions']} | {r['ground_tasks']} | {r['wanted_objects']} "
            f"| {r['plan_tasks']} | {r['plan_layers']} | {r['grounded_median_s'] * 1000:,.1f} "
            f"| {r['by_hand_median_s'] * 1000:,.1f} | {r['ratio_grounded_to_by_hand']:.2f} "
            f"| {r['cached_median_s'] * 1000:,.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.graphs.grounding_bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--actions", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = [
        measure(args.objects, args.actions, wanted=wanted, repeats=args.repeats)
        for wanted in (args.objects, 1)
    ]
    text = table(rows)
    print(text)
    report = {
        "bench": "graphs_grounding",
        "command": " ".join(["python -m bench.graphs.grounding_bench", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "results": rows,
        "table": text,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
