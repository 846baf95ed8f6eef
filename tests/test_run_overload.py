"""The embedded default under overload: `manage.py runall` (SQLite, the file-system broker,
a 4-thread worker) with both cores kept busy by CPU-bound processes and a few hundred
jobs due at once, more than the worker starts within a claim's lifetime (10 s).

Before claims could wait in the broker, every message was older than its claims when the
worker read it: the claims were returned, claimed again and sent again behind the queue,
and the run stopped running jobs for good while it looked healthy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from tests.test_run_smoke import (
    BASE_DIR,
    Run,
    alive,
    descendants,
    embedded_env,
    free_port,
    wait_for,
)

pytestmark = pytest.mark.processes
JOBS = 300
SCHEDULE = f"""
import datetime as dt
from django.utils import timezone
from tasksapp.engine.services import job_schedule
at = timezone.now() + dt.timedelta(seconds=3)
for i in range({JOBS}):
    job_schedule(handler="tasksapp.demo.handlers.flaky", run_at=at,
                 payload={{"seconds": 0.3, "fail_rate": 0}}, delivery="at_least_once")
"""


def _jobs(database) -> list[tuple[str, int, int]]:
    with contextlib.closing(sqlite3.connect(database, timeout=10)) as db:
        return db.execute("SELECT state, attempts, lease_token FROM tasksapp_job").fetchall()


@pytest.fixture
def busy_cores():
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


@pytest.fixture
def quiet_run(tmp_path):
    port, log = free_port(), tmp_path / "runall.log"
    command = [sys.executable, "manage.py", "runall", "--port", str(port), "--no-demo"]
    env = embedded_env(tmp_path)
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=BASE_DIR, env=env, stdout=out, stderr=out)
    run = Run(proc=proc, port=port, log=log, database=tmp_path / "tempo.sqlite3")
    yield run, env
    for pid in descendants(proc.pid):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_the_embedded_run_on_busy_cores_runs_every_job_once(quiet_run, busy_cores):
    run, env = quiet_run
    wait_for(run, "not all children started", lambda: len(descendants(run.proc.pid)) >= 4)
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SCHEDULE],
        cwd=BASE_DIR,
        env=env,
        check=True,
        timeout=120,
    )

    def all_ended() -> bool:
        return all(state == "succeeded" for state, _, _ in _jobs(run.database))

    wait_for(run, f"{JOBS} jobs succeeded", all_ended, seconds=240)
    jobs = _jobs(run.database)
    assert len(jobs) == JOBS
    assert {attempts for _, attempts, _ in jobs} == {1}
    claims_again = sum(token - 1 for _, _, token in jobs)
    assert claims_again <= JOBS * 0.05, f"{claims_again} claims beyond one per job"
    assert "returned" not in run.log.read_text()
