"""The embedded default (`manage.py runall`, what bin/run starts): on SQLite and the
filesystem broker the demo jobs run, the admin answers, the generated admin password is
shown twice and kept for its owner only, SIGTERM stops every child, and a child that dies
takes the others down with it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tasksapp.management.commands.load_demo import FIRST_JOBS

BASE_DIR = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.processes


@dataclass
class Run:
    proc: subprocess.Popen
    port: int
    log: Path
    database: Path
    children: list[int] = field(default_factory=list)  # recorded while all are running

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def embedded_env(data_dir: Path) -> dict[str, str]:
    env = {**os.environ, "TEMPO_EMBEDDED": "1", "TEMPO_DATA_DIR": str(data_dir)}
    env.pop("DJANGO_DEBUG", None)
    # The embedded defaults, spelled out so that a .env file cannot replace them.
    env["DATABASE_URL"] = f"sqlite:///{data_dir / 'tempo.sqlite3'}"
    env["CELERY_BROKER_URL"] = "filesystem://"
    return env


def _proc(pid: int, name: str) -> str:
    try:
        return (Path("/proc") / str(pid) / name).read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _state_and_parent(pid: int) -> tuple[str, int] | None:
    fields = _proc(pid, "stat").rsplit(")", 1)[-1].split()  # after "pid (command)"
    return (fields[0], int(fields[1])) if len(fields) > 1 else None


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        stat = _state_and_parent(int(entry.name)) if entry.name.isdigit() else None
        if stat:
            children.setdefault(stat[1], []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def alive(pid: int) -> bool:
    stat = _state_and_parent(pid)
    return stat is not None and stat[0] != "Z"


def wait_for(run: Run, what: str, check: Callable[[], object], seconds: float = 60) -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and run.proc.poll() is None:
        if result := check():
            return result
        time.sleep(0.25)
    ended = "" if run.proc.poll() is None else f" (runall exited with {run.proc.returncode})"
    output = run.log.read_text()[-4000:]
    pytest.fail(f"{what} within {seconds} s{ended}; runall's output:\n{output}")


def succeeded_jobs(database: Path) -> int:
    if not database.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(database, timeout=5)) as db:
            query = "SELECT count(*) FROM tasksapp_job WHERE state = 'succeeded'"
            return db.execute(query).fetchone()[0]
    except sqlite3.OperationalError:  # not migrated yet
        return 0


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except OSError:
        return 0


def start_lags(database: Path, batch: str, *, first: int = 10_000) -> list[float]:
    """Seconds from run_at to started_at of a demo batch's started greetings (they never
    fail: their run_at is still the one they were started for), of its `first` jobs."""
    with contextlib.closing(sqlite3.connect(database, timeout=5)) as db:
        rows = db.execute(
            "SELECT (julianday(started_at) - julianday(run_at)) * 86400 FROM tasksapp_job"
            " WHERE idempotency_key LIKE ? AND idempotency_key < ? AND handler LIKE '%.greet'"
            " AND started_at IS NOT NULL",
            [f"demo:{batch}:%", f"demo:{batch}:{first:04d}"],
        ).fetchall()
    return sorted(lag for (lag,) in rows)


def start_runall(tmp_path: Path, *options: str) -> Run:
    port, log = free_port(), tmp_path / "runall.log"
    command = [sys.executable, "manage.py", "runall", "--port", str(port), *options]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, cwd=BASE_DIR, env=embedded_env(tmp_path), stdout=out, stderr=out
        )
    return Run(proc=proc, port=port, log=log, database=tmp_path / "tempo.sqlite3")


@pytest.fixture
def run(tmp_path):
    """`manage.py runall` on a free port with its own data folder; killed if still there."""
    run = start_runall(tmp_path)
    yield run
    stop_runall(run)


@pytest.fixture
def quiet_run(tmp_path):
    """The same without the demo."""
    run = start_runall(tmp_path, "--no-demo")
    yield run
    stop_runall(run)


def stop_runall(run: Run) -> None:
    proc = run.proc
    for pid in [*descendants(proc.pid), *run.children]:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_runall_runs_demo_jobs_serves_admin_and_stops_all_children(run):
    wait_for(run, "no demo job succeeded", lambda: succeeded_jobs(run.database), seconds=90)
    # The demo is loaded once the engine is up: the greetings due in its first seconds
    # start near their time, not when the worker is ready at last.
    firsts = wait_for(
        run,
        "the first 12 greetings did not all start",
        lambda: (found := start_lags(run.database, "1", first=FIRST_JOBS))
        and len(found) == 12
        and found,
        seconds=60,
    )
    assert firsts[0] >= 0 and firsts[-1] < 3.0, firsts
    login_page = run.url("/admin/login/")
    wait_for(run, "/admin/login/ did not answer 200", lambda: http_status(login_page) == 200)
    assert http_status(run.url("/static/admin/css/base.css")) == 200
    assert http_status(run.url("/")) == 200  # redirected to the admin's login page

    def announced() -> str:
        log = run.log.read_text()
        return log if "stop with Ctrl-C" in log else ""

    log = wait_for(run, "no start-up announcement", announced)
    kept = run.database.parent / "admin-password"
    password = kept.read_text().strip()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert log.count(f"user admin, password {password}") == 2  # when made, and at the end
    assert "worker: threads pool. A handler past its time limit" in log

    run.children = descendants(run.proc.pid)
    assert len(run.children) >= 4, "web, dispatcher, worker and beat"
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=60) == 0, run.log.read_text()[-4000:]
    assert [pid for pid in run.children if alive(pid)] == []
    assert "did not stop" not in run.log.read_text()  # each child stopped by itself


def test_runall_stops_everything_when_one_child_dies(run):
    def dispatcher_pid() -> int | None:
        pids = descendants(run.proc.pid)
        return next((p for p in pids if "dispatcher" in _proc(p, "cmdline")), None)

    pid = wait_for(run, "no dispatcher started", dispatcher_pid)
    wait_for(run, "not all children started", lambda: len(descendants(run.proc.pid)) >= 4)
    run.children = descendants(run.proc.pid)
    os.kill(pid, signal.SIGKILL)

    assert run.proc.wait(timeout=60) == 1
    assert [p for p in run.children if alive(p)] == []
    assert "dispatcher exited unexpectedly" in run.log.read_text()


def test_the_embedded_worker_reads_its_next_message_as_soon_as_a_slot_frees(quiet_run):
    """On the file-system broker Celery's own loop acknowledged a full prefetch window only
    every 2 s: 4 messages each 2 s, jobs due 0.2 s apart fell seconds behind
    (tasksapp/engine/worker/polling_loop.py). 40 jobs due over 5 s start near their time."""
    wait_for(quiet_run, "the worker did not start", lambda: "ready." in quiet_run.log.read_text())
    load = [sys.executable, "manage.py", "load_demo", "--count", "40", "--seconds", "5"]
    env = embedded_env(quiet_run.database.parent)
    subprocess.run([*load, "--batch", "lag"], cwd=BASE_DIR, env=env, check=True, timeout=60)
    lags = wait_for(
        quiet_run,
        "the 24 greetings did not all start",
        lambda: (found := start_lags(quiet_run.database, "lag")) and len(found) == 24 and found,
        seconds=60,
    )
    assert lags[0] >= 0  # never early
    assert lags[int(len(lags) * 0.9)] < 3.0, lags  # seconds behind, one window each 2 s, before
