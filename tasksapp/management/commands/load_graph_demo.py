"""Schedule a few graph jobs of the thesis's demo: the friends job and the suggestions job
(tasksapp/graphs/demo_tasks.py), for a handful of users, with simulated latencies of
1-5 s and occasional failures. Keys are made of the batch name, so loading the same batch
twice adds nothing."""

from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from tasksapp.demo.graph_tasks import DEFAULT_FAILURE_RATE, DEMO_JOBS
from tasksapp.engine.db import tempo_atomic
from tasksapp.graphs.models import GraphRun, Strategy
from tasksapp.graphs.services import GraphInputError, graph_job_schedule

# The thesis's pairing: the friends job reruns a failed task (its Google+ task refreshes
# its token in `rescue`); the suggestions job rolls back what it published.
STRATEGIES = {"friends": Strategy.RERUN, "suggestions": Strategy.ROLLBACK}
RETRY_POLICY = {"delays": [1, 2, 5]}


def demo_graph_jobs(
    *,
    now: dt.datetime,
    count: int,
    batch: str,
    latency_scale: float,
    failure_rate: float,
    strategy: str | None = None,
) -> list[dict]:
    """The keyword arguments of `graph_job_schedule` for each demo graph job: friends and
    suggestions jobs in turn, for users 1, 2, ..., one second apart."""
    jobs = []
    for n in range(count):
        name = ("friends", "suggestions")[n % 2]
        has = {"user_id": n // 2 + 1, "latency_scale": latency_scale, "failure_rate": failure_rate}
        jobs.append(
            {
                "has": has,
                "wants": DEMO_JOBS[name]["wants"],
                "strategy": strategy or STRATEGIES[name],
                "run_at": now + dt.timedelta(seconds=1 + n),
                "idempotency_key": f"graph-demo:{batch}:{n:03d}",
                "task_retry_policy": RETRY_POLICY,
            }
        )
    return jobs


class Command(BaseCommand):
    help = "Schedule demo graph jobs: the thesis's friends and suggestions jobs."

    def add_arguments(self, parser):
        parser.add_argument("--count", type=int, default=6, help="Graph jobs to schedule.")
        parser.add_argument("--batch", default="1", help="Batch name in the idempotency keys.")
        parser.add_argument(
            "--latency-scale", type=float, default=1.0, help="Each call sleeps 1-5 s times this."
        )
        parser.add_argument(
            "--failure-rate",
            type=float,
            default=DEFAULT_FAILURE_RATE,
            help="Probability that a simulated call fails.",
        )
        parser.add_argument(
            "--strategy", choices=Strategy.values, help="One strategy for all (default: mixed)."
        )

    def handle(self, *args, count, batch, latency_scale, failure_rate, strategy, **options):
        jobs = demo_graph_jobs(
            now=timezone.now(),
            count=count,
            batch=batch,
            latency_scale=latency_scale,
            failure_rate=failure_rate,
            strategy=strategy,
        )
        keys = [job["idempotency_key"] for job in jobs]
        existing = GraphRun.objects.filter(job__idempotency_key__in=keys).count()
        try:
            with tempo_atomic():
                graphs = [graph_job_schedule(**job) for job in jobs]
        except GraphInputError as exc:
            raise CommandError(str(exc)) from exc
        tasks = sum(len(graph.plan["needs"]) for graph in graphs)
        self.stdout.write(
            f"graph demo batch {batch!r}: {len(graphs)} graph jobs ({tasks} tasks), "
            f"{len(graphs) - existing} new, starting over the next {count + 1} s"
        )
