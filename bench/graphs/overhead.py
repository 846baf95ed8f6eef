"""Task-graph overhead: from a task's last input completing to the task's own start.

    python -m bench.graphs.overhead [--graphs 5] [--configs 2x4 1x8] [--env KEY=VALUE ...]

A fresh database, one dispatcher and Celery workers (threads pool) as real processes, and
the 100-task graph of ``bench.graphs.tasks`` (a root, then nine stages that fan out to ten
tasks and join them), run ``--graphs`` times one after another after a warm-up graph, for
each configuration of workers (``2x4``: two worker processes of four threads each).
Every task returns at once, so the time between tasks is the executor's: the completing
task's merge and release (one transaction with the GraphRun row locked), the commit,
NOTIFY, the dispatcher's claim, the broker, the worker's start of the child job and the
gathering of the dependant's inputs.

For each of the 99 tasks with inputs: overhead = its ``started_at`` − the latest
``finished_at`` of the tasks it runs after (all on this host's clock), split into
release (→ ``released_at``) and pick-up (→ ``started_at``). The goal is p99 ≤ 50 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import BROKER_URL, BenchDatabase, summary, table, write_json
from tests.processes.support import Cluster, wait_for

TASK_MODULES = "tasksapp.demo.graph_tasks,bench.graphs.tasks"
MEASURES = {
    "overhead_ms": "last input finished → task started (all 99 dependants)",
    "overhead_join_ms": "… of the 9 joins (released alone)",
    "overhead_fan_out_ms": "… of the 90 fan-out tasks (released ten at once)",
    "release_ms": "last input finished → child job inserted (lock, merge, release)",
    "claim_ms": "child job due → claimed (commit, NOTIFY, dispatcher)",
    "start_ms": "claimed → started by a worker (broker, Celery)",
    "handler_ms": "job started → task called (executor, inputs)",
}
GOAL_P99_MS = 50.0


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=5, help="measured graphs (after 1 warm-up)")
    parser.add_argument(
        "--configs",
        nargs="+",
        default=["2x4", "1x8"],
        help="worker processes x threads each, one cluster per config",
    )
    parser.add_argument(
        "--env", nargs="*", default=[], help="extra KEY=VALUE settings for the processes"
    )
    return parser.parse_args()


def setup_django(database_url: str) -> None:
    """This process schedules the graphs through the service, on the bench's database."""
    os.environ.update(
        DATABASE_URL=database_url,
        DJANGO_SECRET_KEY=os.environ["DJANGO_SECRET_KEY"],
        TEMPO_GRAPH_TASK_MODULES=TASK_MODULES,
        DJANGO_SETTINGS_MODULE="schedapp.settings",
    )
    import django

    django.setup()


def run_graph(n: int) -> int:
    from bench.graphs.tasks import HAS, WANTS
    from tasksapp.graphs.models import GraphRun, GraphState
    from tasksapp.graphs.services import graph_job_schedule

    graph = graph_job_schedule(has={HAS: n}, wants=[WANTS])
    wait_for(
        lambda: GraphRun.objects.filter(id=graph.id)
        .exclude(state="running")
        .exclude(state="pending"),
        timeout=120,
        interval=0.05,
        message=f"graph {graph.id} finished",
    )
    graph.refresh_from_db()
    assert graph.state == GraphState.SUCCEEDED, (graph.state, graph.error)
    return graph.id


def _ms(start, end) -> float:
    return (end - start).total_seconds() * 1000


def measure(graph_ids: list[int]) -> dict[str, list[float]]:
    """Overhead of every task with inputs, split by how it was released (alone: a join;
    with nine others: a fan-out task) and by phase (the child job's own timestamps)."""
    from tasksapp.engine.models import Job
    from tasksapp.graphs.selectors import graph_run_get

    found: dict[str, list[float]] = {name: [] for name in MEASURES}
    for graph_id in graph_ids:
        view = graph_run_get(graph_run_id=graph_id)
        jobs = Job.objects.in_bulk([task.job_id for task in view.tasks])
        finished = {task.task: task.finished_at for task in view.tasks}
        for task in view.tasks:
            if not task.after:
                continue
            ready, job = max(finished[name] for name in task.after), jobs[task.job_id]
            overhead = _ms(ready, task.started_at)
            found["overhead_ms"].append(overhead)
            kind = "join" if task.task.endswith(".join") else "fan_out"
            found[f"overhead_{kind}_ms"].append(overhead)
            found["release_ms"].append(_ms(ready, task.released_at))
            found["claim_ms"].append(_ms(job.run_at, job.claimed_at))
            found["start_ms"].append(_ms(job.claimed_at, job.started_at))
            found["handler_ms"].append(_ms(job.started_at, task.started_at))
    return found


def graph_spans(graph_ids: list[int]) -> list[float]:
    from tasksapp.graphs.models import GraphRun

    rows = GraphRun.objects.filter(id__in=graph_ids).values_list("started_at", "finished_at")
    return [(end - start).total_seconds() * 1000 for start, end in rows]


def run_config(db: BenchDatabase, args, workers: int, concurrency: int) -> dict:
    """One dispatcher and ``workers`` × ``concurrency`` threads; a warm-up graph, then
    ``args.graphs`` measured ones, one after another."""
    logs = Path(tempfile.mkdtemp(prefix="bench-graphs-"))
    cluster = Cluster(
        database_url=db.url,
        broker_url=BROKER_URL,
        queue=f"bench-{uuid.uuid4().hex[:6]}",
        logs=logs,
        TEMPO_GRAPH_TASK_MODULES=TASK_MODULES,
        TEMPO_LOG_LEVEL="WARNING",
        **dict(item.split("=", 1) for item in args.env),
    )
    try:
        cluster.dispatcher("d1")
        for i in range(workers):
            cluster.worker(f"w{i + 1}", concurrency=concurrency)
        time.sleep(6)
        run_graph(0)  # warm-up: connections, imports
        graph_ids = [run_graph(n + 1) for n in range(args.graphs)]
    finally:
        cluster.stop()
    samples = measure(graph_ids)
    results = {name: summary(values) for name, values in samples.items()}
    results["graph_ms"] = summary(graph_spans(graph_ids))
    results["samples_overhead_ms"] = samples["overhead_ms"]
    return results


def main() -> None:
    args = parse()
    configs: dict[str, dict] = {}
    with BenchDatabase("tempo_bench_graphs") as db:
        setup_django(db.url)
        for config in args.configs:
            workers, concurrency = (int(n) for n in config.split("x"))
            configs[config] = run_config(db, args, workers, concurrency)
        from django.db import connections

        connections.close_all()
    rows = [
        {"config": config, "measure": name, **values}
        for config, results in configs.items()
        for name, values in results.items()
        if name != "samples_overhead_ms"
    ]
    print(table(rows, ["config", "measure", "n", "p50", "p95", "p99", "max", "avg"]))
    for config, results in configs.items():
        p99 = results["overhead_ms"]["p99"]
        results["goal_met"] = p99 <= GOAL_P99_MS
        verdict = "met" if results["goal_met"] else "missed"
        print(f"{config}: goal p99 <= {GOAL_P99_MS:g} ms {verdict} ({p99:.1f} ms)")
    path = write_json(
        "graphs_overhead",
        {
            "command": " ".join(["python -m bench.graphs.overhead", *sys.argv[1:]]),
            "args": vars(args),
            "graph": {"tasks": 100, "dependants": 99, "stages": 9, "width": 10},
            "goal_p99_ms": GOAL_P99_MS,
            "measures": {**MEASURES, "graph_ms": "one graph, start to finish"},
            "configs": configs,
        },
    )
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
