"""A dispatcher and a worker as real processes with Tempo's tables on the database
"tempo": jobs written there run, and the handlers' writes land on the default database."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connections

from tests.processes.support import (
    EFFECTS_TABLE,
    Cluster,
    effect_counts,
    insert_jobs,
    outcome,
    wait_for,
)

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(databases=["default", "tempo"], transaction=True),
]
JOBS = 30


def url(alias: str) -> str:
    settings = connections[alias].settings_dict
    return (
        f"postgres://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:"
        f"{settings['PORT'] or 5432}/{settings['NAME']}"
    )


def test_a_dispatcher_and_a_worker_run_jobs_from_tempos_database(broker_url, queue_name, tmp_path):
    cluster = Cluster(
        database_url=url("default"),
        broker_url=broker_url,
        queue=queue_name,
        logs=tmp_path,
        TEMPO_DATABASE_URL=url("tempo"),
    )
    with (
        psycopg.connect(url("default"), autocommit=True) as default,
        psycopg.connect(url("tempo"), autocommit=True) as tempo,
    ):
        default.execute(EFFECTS_TABLE)
        default.execute("TRUNCATE test_effects")
        try:
            cluster.dispatcher("d1")
            cluster.worker("w1", concurrency=2)
            wait_for(
                lambda: tempo.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
                timeout=30,
                message="worker registered on Tempo's database",
            )
            insert_jobs(tempo, count=JOBS, start=1, spread=1)
            wait_for(
                lambda: outcome(tempo).get("succeeded") == JOBS,
                timeout=60,
                message=f"{JOBS} jobs succeeded",
            )
        finally:
            cluster.stop()
        counts = effect_counts(default)
        assert len(counts) == JOBS and set(counts.values()) == {1}
        assert tempo.execute("SELECT count(*) FROM tasksapp_dispatcher").fetchone()[0] == 1
        leftover = default.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'tasksapp_job'"
        ).fetchone()[0]
        assert leftover == 0
