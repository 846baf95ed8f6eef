"""What `./bin/run` gives a new user: `manage.py runall` with the demo, in the embedded
mode (SQLite and the file-system broker in a data folder of its own), for `--seconds`;
then the start lag (started_at − run_at) of the jobs finished by then, by kind: the plain
demo jobs and the graph demo's task jobs.

    .venv/bin/python -m bench.embedded [--seconds 60] [--runs 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, summary, write_json
from tests.processes.support import free_port

FINISHED = "('succeeded', 'dead', 'cancelled')"
# The demo's own handlers (tasksapp.demo.handlers); every other job is a graph task's.
PLAIN = "handler LIKE 'tasksapp.demo.handlers.%'"
LAGS = f"""SELECT {PLAIN}, (julianday(started_at) - julianday(run_at)) * 86400000
FROM tasksapp_job WHERE state IN {FINISHED} AND started_at IS NOT NULL"""


def one_run(seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="tempo-embedded-") as folder:
        # As ./bin/run sets it up (bin/_embedded), in a data folder of the bench's own.
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("DATABASE_URL", "CELERY_BROKER_URL")
        }
        env["TEMPO_DATA_DIR"] = folder
        embedded = str(ROOT / "bin" / "_embedded")
        command = [embedded, sys.executable, "manage.py", "runall", "--port", str(free_port())]
        with (Path(folder) / "runall.log").open("wb") as log:
            run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        try:
            time.sleep(seconds)
        finally:
            run.send_signal(signal.SIGINT)
            run.wait(timeout=60)
        with contextlib.closing(sqlite3.connect(f"{folder}/tempo.sqlite3")) as db:
            rows = db.execute(LAGS).fetchall()
    plain = [lag for is_plain, lag in rows if is_plain]
    graph = [lag for is_plain, lag in rows if not is_plain]
    return {"demo jobs": summary(plain), "graph task jobs": summary(graph)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    runs = [one_run(args.seconds) for _ in range(args.runs)]
    for number, run in enumerate(runs, 1):
        for kind, lag in run.items():
            print(
                f"run {number} {kind}: n {lag['n']}, start lag ms p50 {lag['p50']:.1f}"
                f" p95 {lag['p95']:.1f} p99 {lag['p99']:.1f} max {lag['max']:.1f}"
            )
    path = write_json("embedded", {"seconds": args.seconds, "runs": runs})
    print(json.dumps({"written": str(path)}))


if __name__ == "__main__":
    main()
