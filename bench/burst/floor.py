"""The database's own floor under a burst: how fast PostgreSQL alone writes the row
versions every at-least-once job costs, with the engine's own statements in the engine's
batches, and no dispatcher, broker or worker in the way. `written`: three versions
(claimed, running, succeeded), every start written first; `deferred`: two (claimed,
succeeded), the start only read and written with the end (TEMPO_TUNING_DEFERRED_START_SECONDS).

    python -m bench.burst.floor [--size 10000] [--connections 1 2] [--batch 250] [--rounds 3]
                                [--starts written deferred]

Each round: N no-op jobs due now in a fresh table state, split between `--connections`
sessions running side by side (as two dispatchers and their workers would); each claims
its share in one statement, then starts and finishes it in statements of `--batch` jobs
(one per message, as workers send them). Its starts/s (claim to last start, as `bench.burst`
counts) and jobs/s (to the last finish) bound `bench.burst` from above: there, the same
statements share the same cores with the dispatchers, the broker and the workers.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from bench.burst.__main__ import INSERT, NOOP
from bench.common import BenchDatabase, django_on, table, write_json

LEAD_S = 0.5
WORKER_ROW = """
INSERT INTO tasksapp_workerprocess (name, hostname, pid, running, succeeded, failed, queues)
VALUES ('floor', 'floor', 0, 0, 0, 0, '[]')
ON CONFLICT (name) DO UPDATE SET held = NULL
"""
TTL_S = 10


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=250, help="jobs per start/finish")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--starts", nargs="+", choices=["written", "deferred"], default=["written", "deferred"]
    )
    return parser.parse_args()


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def one_share(conn, ids: list[int], batch: int, starts: str) -> dict[str, float]:
    """Claim, start and finish these jobs as the engine does; seconds per phase."""
    from tasksapp.engine.store import postgres_sql as q

    start = q.START_CLAIMED if starts == "written" else q.START_DEFERRING

    began = time.perf_counter()
    claims = conn.execute(
        q.CLAIM_DUE, {"owner": "floor", "ttl": TTL_S, "ids": ids, "lead": LEAD_S}
    ).fetchall()
    claimed = time.perf_counter()
    for part in chunks(claims, batch):
        conn.execute(
            start,
            {"worker": "floor", "ttl": TTL_S, "lead": LEAD_S, **q.fenced_params(part)},
        ).fetchall()
    started = time.perf_counter()
    now_ms = time.time() * 1000
    for part in chunks(claims, batch):
        conn.execute(
            q.SUCCEED_RUNNING,
            q.outcome_params([(c[0], c[1], None, now_ms) for c in part]),
        ).fetchall()
    finished = time.perf_counter()
    return {"claim": claimed - began, "start": started - claimed, "finish": finished - started}


def one_round(db: BenchDatabase, args: argparse.Namespace, connections: int, starts: str) -> dict:
    with db.connect() as conn:
        conn.execute("DELETE FROM tasksapp_job")
        conn.execute(
            INSERT,
            {"handler": NOOP, "at": time.time(), "n": args.size, "delivery": "at_least_once"},
        )
        conn.execute(WORKER_ROW)  # the deferred start records its jobs on it
        conn.execute("VACUUM ANALYZE tasksapp_job")
        ids = [row[0] for row in conn.execute("SELECT id FROM tasksapp_job ORDER BY id")]
    sessions = [db.connect() for _ in range(connections)]
    shares = [ids[i::connections] for i in range(connections)]
    began = time.perf_counter()
    with ThreadPoolExecutor(connections) as pool:
        phases = list(pool.map(lambda c, s: one_share(c, s, args.batch, starts), sessions, shares))
    total = time.perf_counter() - began
    for session in sessions:
        session.close()
    with db.connect() as conn:
        done = conn.execute(
            "SELECT count(*) FROM tasksapp_job WHERE state = 'succeeded'"
        ).fetchone()[0]
    assert done == args.size, f"{done} of {args.size} succeeded"
    return {
        "starts": starts,
        "connections": connections,
        "jobs": args.size,
        **{f"{name}_s": round(max(p[name] for p in phases), 3) for name in phases[0]},
        # What bench.burst reports: from the claim to the last start (finishes excluded).
        "starts_per_s": round(args.size / max(p["claim"] + p["start"] for p in phases)),
        "total_s": round(total, 3),
        "jobs_per_s": round(args.size / total),
    }


def main() -> None:
    args = parse()
    with BenchDatabase("tempo_bench_floor") as db:
        django_on(db.url)
        rows = [
            one_round(db, args, connections, starts)
            for _ in range(args.rounds)
            for connections in args.connections  # alternating, in one run
            for starts in args.starts
        ]
    print(table(rows, list(rows[0])))
    path = write_json("burst_floor", {"args": vars(args), "rounds": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
