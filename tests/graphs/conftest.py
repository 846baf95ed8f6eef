"""Fixtures for graph execution: the test tasks, their call log, and in-process and
real-process ways to run graph jobs."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

import tests.handlers.graph_tasks as graph_tasks
from tasksapp.engine.models import Job
from tasksapp.engine.models.jobs import DUE_STATES
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tests.processes.conftest import db_url, sql  # noqa: F401 - fixtures
from tests.processes.support import Cluster

TASK_MODULES = "tasksapp.demo.graph_tasks,tests.handlers.graph_tasks"


class Calls:
    """The call log of tests.handlers.graph_tasks (see its docstring)."""

    def _rows(self, query: str, params: list) -> list[tuple]:
        return graph_tasks._connection().execute(query, params).fetchall()

    def count(self, task: str, kind: str = "run", key: str | None = None) -> int:
        query = "SELECT count(*) FROM test_graph_calls WHERE task = %s AND kind = %s"
        params = [task, kind]
        if key is not None:
            query, params = query + " AND key = %s", [*params, key]
        return self._rows(query, params)[0][0]

    def order(self, kind: str = "run", key: str | None = None) -> list[str]:
        query = "SELECT task FROM test_graph_calls WHERE kind = %s"
        params = [kind]
        if key is not None:
            query, params = query + " AND key = %s", [*params, key]
        return [row[0] for row in self._rows(query + " ORDER BY id", params)]

    def pid_of(self, task: str) -> int | None:
        rows = self._rows(
            "SELECT pid FROM test_graph_calls WHERE task = %s AND kind = 'run' ORDER BY id",
            [task],
        )
        return rows[-1][0] if rows else None


@pytest.fixture
def calls(transactional_db) -> Calls:
    conn = graph_tasks._connection()
    conn.execute(graph_tasks.CALLS_TABLE)
    conn.execute("TRUNCATE test_graph_calls")
    yield Calls()
    graph_tasks.BARRIERS.clear()
    graph_tasks.close()


def run_next(*, before: dt.datetime | None = None) -> Job | None:
    """Claim and run the due job with the smallest (run_at, id), in this process."""
    horizon = before or timezone.now() + dt.timedelta(seconds=1)
    due = Job.objects.filter(state__in=DUE_STATES, run_at__lte=horizon).order_by("run_at", "id")
    job = due.first()
    if job is None:
        return None
    claims = job_claim_due(ids=[job.id], owner="t", ttl=10, lead=2)
    execute_batch([[c.id, c.token, c.run_at_ms] for c in claims])
    job.refresh_from_db()
    return job


def run_job(job_id: int) -> Job:
    """Claim and run one given job (due within 2 s), in this process."""
    claims = job_claim_due(ids=[job_id], owner="t", ttl=10, lead=2)
    assert claims, f"job {job_id} is not due"
    execute_batch([[c.id, c.token, c.run_at_ms] for c in claims])
    return Job.objects.get(id=job_id)


def drain(limit: int = 200) -> list[Job]:
    """Run due jobs one at a time, in (run_at, id) order, until none is due."""
    ran = []
    while len(ran) < limit and (job := run_next()) is not None:
        ran.append(job)
    return ran


@pytest.fixture
def graph_cluster(db_url, broker_url, queue_name, tmp_path):  # noqa: F811 - fixture
    running = Cluster(
        database_url=db_url,
        broker_url=broker_url,
        queue=queue_name,
        logs=tmp_path,
        TEMPO_GRAPH_TASK_MODULES=TASK_MODULES,
    )
    yield running
    running.stop()
