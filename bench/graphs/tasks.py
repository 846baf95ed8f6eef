"""A 100-task graph for the execution bench (names ``bench.*``), registered in the default
registry when imported (list this module in TEMPO_GRAPH_TASK_MODULES).

Nine stages after a root: each stage fans out to ten tasks that need the stage's input
and joins their outputs in one task, whose output feeds the next stage::

    bench.root → bench.s0.f0 … bench.s0.f9 → bench.s0.join → bench.s1.f0 … → bench.s8.join

1 + 9 × (10 + 1) = 100 tasks, 99 of them with inputs. Every task returns at once: the
bench measures the executor, not the work.
"""

from __future__ import annotations

from typing import Any

from tasksapp.graphs.registry import graph_task

STAGES = 9
WIDTH = 10
HAS = "bench_input"
WANTS = f"bench_s{STAGES}"


def _fan(stage: int, index: int):
    def fan(inputs: dict[str, Any]) -> dict[str, Any]:
        return {f"bench_s{stage}_f{index}": inputs[f"bench_s{stage}"] + index}

    fan.__qualname__ = f"fan_s{stage}_f{index}"
    return fan


def _join(stage: int):
    def join(inputs: dict[str, Any]) -> dict[str, Any]:
        return {f"bench_s{stage + 1}": sum(inputs[f"bench_s{stage}_f{i}"] for i in range(WIDTH))}

    join.__qualname__ = f"join_s{stage}"
    return join


@graph_task(name="bench.root", requires=[HAS], provides=["bench_s0"])
def root(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"bench_s0": inputs[HAS]}


for _stage in range(STAGES):
    for _index in range(WIDTH):
        graph_task(
            name=f"bench.s{_stage}.f{_index}",
            requires=[f"bench_s{_stage}"],
            provides=[f"bench_s{_stage}_f{_index}"],
        )(_fan(_stage, _index))
    graph_task(
        name=f"bench.s{_stage}.join",
        requires=[f"bench_s{_stage}_f{i}" for i in range(WIDTH)],
        provides=[f"bench_s{_stage + 1}"],
    )(_join(_stage))
