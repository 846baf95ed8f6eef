"""The hand-over: how long a worker's slot takes from one job's end to the next job's
handler, when more jobs are due at once than the worker has slots.

    python -m bench.handover [--slots 5] [--rounds 20] [--trees A B ...]

One dispatcher and one Celery worker (threads pool, --slots threads), real processes on a
fresh database. Each round, 2 × slots practice jobs (83 ms of work, then an INSERT) fall
due at the same instant: the first `slots` start at once, the others wait for a slot.
Paired in order, each waiting job's handler begins some time after a first-round job's
work ended (its INSERT) and after its commit (`finished_at`); those gaps are the
hand-over, which a zero-overhead scheduler would not have. With --trees, each round robin
of runs takes one source tree after the other (checkouts of this repository), so that
the trees are compared in the same sitting.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import BenchDatabase, bench_cluster, summary, table, write_json
from bench.practice.handlers import EXECUTIONS_TABLE
from tests.processes.support import outcome, wait_for

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "bench.practice.handlers.process_locked_job"
GAP_SECONDS = 1.5  # between rounds: every job of a round has ended

INSERT_ROUND = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT %(handler)s, '{}', %(run_at)s, 'scheduled', 0, 5, '{"delays": [0.5, 1, 2]}',
    'transactional', md5(random()::text || i), 0, '', '', '[]'
FROM generate_series(1, %(count)s) AS i
"""

JOBS = """
SELECT j.run_at, j.started_at, j.finished_at, e.executed_at
FROM tasksapp_job j JOIN practice_execution e ON e.job_id = j.id
WHERE j.state = 'succeeded' ORDER BY j.run_at, j.started_at
"""


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=1, help="runs per tree")
    parser.add_argument(
        "--trees", nargs="*", default=[], help="source trees to compare (default: this one)"
    )
    parser.add_argument("--server", default="", help="PostgreSQL server URL (no database)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def run_once(args) -> dict:
    """One run in this tree: every waiting job's hand-over gaps (ms)."""
    with BenchDatabase("tempo_bench_handover", server=args.server) as db, db.connect() as conn:
        conn.execute(EXECUTIONS_TABLE)
        cluster = bench_cluster(db.url, "handover")
        try:
            cluster.dispatcher("d1")
            cluster.worker("w1", concurrency=args.slots)
            wait_for(
                lambda: conn.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0],
                timeout=30,
                message="the worker ready",
            )
            first_due = time.time() + 3
            for index in range(args.rounds):
                due = first_due + index * GAP_SECONDS
                conn.execute(
                    INSERT_ROUND,
                    {"handler": HANDLER, "run_at": _at(due), "count": 2 * args.slots},
                )
            total = 2 * args.slots * args.rounds
            wait_for(
                lambda: outcome(conn).get("succeeded", 0) >= total,
                timeout=due + 30 - time.time(),
                interval=0.5,
                message=f"all {total} jobs succeeded",
            )
            rows = conn.execute(JOBS).fetchall()
        finally:
            cluster.stop()
    return gaps(rows, args.slots)


def gaps(rows, slots: int) -> dict:
    """Pair each round's first-started jobs with its waiting ones, in order."""
    after_work, after_commit, waiting_lag = [], [], []
    rounds: dict = {}
    for row in rows:
        rounds.setdefault(row[0], []).append(row)
    for run_at, jobs in rounds.items():
        jobs.sort(key=lambda r: r[1])
        first, waiting = jobs[:slots], jobs[slots:]
        ends = sorted(first, key=lambda r: r[3])
        commits = sorted(r[2] for r in first)
        for end, commit, job in zip(ends, commits, waiting, strict=False):
            after_work.append(_ms(job[1] - end[3]))
            after_commit.append(_ms(job[1] - commit))
            waiting_lag.append(_ms(job[1] - run_at))
    return {
        "work end → next handler": after_work,
        "commit → next handler": after_commit,
        "waiting job's start lag (run_at → handler)": waiting_lag,
    }


def _ms(delta) -> float:
    return delta.total_seconds() * 1000


def _at(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def in_tree(tree: str, args) -> dict:
    """One run in a checkout, with this interpreter; its gaps as JSON. A checkout older
    than this bench gets a copy of it (its own code is what is measured)."""
    if not (Path(tree) / "bench" / "handover").exists():
        shutil.copytree(Path(__file__).parent, Path(tree) / "bench" / "handover")
    command = [sys.executable, "-m", "bench.handover", "--one", "--slots", str(args.slots)]
    command += ["--rounds", str(args.rounds), "--server", args.server]
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run(command, cwd=tree, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    args = parse()
    if args.one:
        print(json.dumps(run_once(args)))
        return
    trees = args.trees or [str(ROOT)]
    collected: dict[str, dict[str, list[float]]] = {tree: {} for tree in trees}
    for _ in range(args.runs):
        for tree in trees:
            for measure, values in in_tree(tree, args).items():
                collected[tree].setdefault(measure, []).extend(values)
    rows = [
        {"tree": tree, "measure": measure, **summary(values)}
        for tree, measures in collected.items()
        for measure, values in measures.items()
    ]
    print(table(rows, ["tree", "measure", "n", "p50", "p95", "p99", "max", "avg"]))
    path = write_json("handover", {"args": vars(args), "rows": rows})
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
