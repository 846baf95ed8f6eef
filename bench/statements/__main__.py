"""The worker's per-job statements, timed in one process: start and finish of one job.

    python -m bench.statements [--jobs 3000]

A fresh database on the local PostgreSQL; the jobs are claimed in one statement, then
each is started (`job_start`) and finished (`job_succeed`) on its own, as a worker does
for a job alone, through the engine's sessions (asynchronous commit, prepared
statements). The times are the whole Python call, round trip included: what the engine
adds between a job's run time and its handler, and after it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time

from bench.common import BenchDatabase, summary, table, write_json


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    return parser.parse_args()


def setup_django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "schedapp.settings")
    import django

    django.setup()


def time_calls(jobs: int) -> dict[str, list[float]]:
    from django.db import connection
    from django.utils import timezone

    from tasksapp.engine.models import Job
    from tasksapp.engine.sessions import use_engine_sessions
    from tasksapp.engine.transitions import job_claim_due, job_start, job_succeed

    use_engine_sessions()
    run_at = timezone.now() - dt.timedelta(seconds=1)
    Job.objects.bulk_create([Job(handler="bench.none", run_at=run_at) for _ in range(jobs)])
    with connection.cursor() as cursor:  # as autovacuum would: plans see the real table
        cursor.execute("ANALYZE tasksapp_job")
    ids = list(Job.objects.values_list("id", flat=True))
    times: dict[str, list[float]] = {"start": [], "finish": []}
    for claim in job_claim_due(ids=ids, owner="bench", ttl=600):
        began = time.perf_counter()
        (started,) = job_start(claims=[(claim.id, claim.token)], worker="bench", ttl=600)
        between = time.perf_counter()
        job_succeed(outcomes=[(started.id, started.token, None, None)])
        times["start"].append((between - began) * 1e6)
        times["finish"].append((time.perf_counter() - between) * 1e6)
    return times


def main() -> None:
    args = parse()
    with BenchDatabase("tempo_bench_statements") as db:
        setup_django(db.url)
        times = time_calls(args.jobs)
        from django.db import connection

        connection.close()  # before the database is dropped
    rows = [{"call": name, **summary(values)} for name, values in times.items()]
    print(table(rows, ["call", "n", "p50", "p95", "p99", "max", "avg"]))
    print(f"wrote {write_json('statements', {'jobs': args.jobs, 'microseconds': rows})}")


if __name__ == "__main__":
    main()
