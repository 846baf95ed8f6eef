"""The database's own floor under a burst: how fast PostgreSQL alone writes the three row
versions every at-least-once job costs (claimed, running, succeeded), with the engine's
own statements in the engine's batches, and no dispatcher, broker or worker in the way.

    python -m bench.burst.floor [--size 10000] [--dispatchers 2] [--batch 250] [--rounds 3]

Each round: N no-op jobs due now in a fresh table state; the claim (one statement per
dispatcher, as a burst is claimed), then the start and the success (one statement per
message of `--batch` jobs, as workers send them), one after the other on one
connection. The jobs/s it prints bound `bench.burst` from above: there, the same
statements share the same cores with the dispatchers, the broker and the workers.
"""

from __future__ import annotations

import argparse
import time

from bench.burst.__main__ import INSERT, NOOP
from bench.common import BenchDatabase, django_on, table, write_json

LEAD_S = 0.5
TTL_S = 10


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--dispatchers", type=int, default=2, help="claim statements")
    parser.add_argument("--batch", type=int, default=250, help="jobs per start/finish")
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def one_round(conn, args: argparse.Namespace) -> dict:
    from tasksapp.engine.store import postgres_sql as q

    conn.execute("DELETE FROM tasksapp_job")
    conn.execute(
        INSERT, {"handler": NOOP, "at": time.time(), "n": args.size, "delivery": "at_least_once"}
    )
    conn.execute("VACUUM ANALYZE tasksapp_job")
    ids = [row[0] for row in conn.execute("SELECT id FROM tasksapp_job ORDER BY id")]
    began = time.perf_counter()
    claims = []
    for share in chunks(ids, -(-len(ids) // args.dispatchers)):
        claims += conn.execute(
            q.CLAIM_DUE, {"owner": "floor", "ttl": TTL_S, "ids": share, "lead": LEAD_S}
        ).fetchall()
    claimed = time.perf_counter()
    for batch in chunks(claims, args.batch):
        conn.execute(
            q.START_CLAIMED,
            {
                "worker": "floor",
                "ttl": TTL_S,
                "lead": LEAD_S,
                "ids": [c[0] for c in batch],
                "tokens": [c[1] for c in batch],
            },
        ).fetchall()
    started = time.perf_counter()
    now_ms = time.time() * 1000
    for batch in chunks(claims, args.batch):
        conn.execute(
            q.SUCCEED_RUNNING,
            {
                "ids": [c[0] for c in batch],
                "tokens": [c[1] for c in batch],
                "results": ["null"] * len(batch),
                "began_ms": [now_ms] * len(batch),
            },
        ).fetchall()
    finished = time.perf_counter()
    done = conn.execute("SELECT count(*) FROM tasksapp_job WHERE state = 'succeeded'").fetchone()[0]
    assert done == args.size, f"{done} of {args.size} succeeded"
    total = finished - began
    return {
        "jobs": args.size,
        "claim_s": round(claimed - began, 3),
        "start_s": round(started - claimed, 3),
        "finish_s": round(finished - started, 3),
        "total_s": round(total, 3),
        "jobs_per_s": round(args.size / total),
    }


def main() -> None:
    args = parse()
    with BenchDatabase("tempo_bench_floor") as db:
        django_on(db.url)
        with db.connect() as conn:
            rows = [one_round(conn, args) for _ in range(args.rounds)]
    print(table(rows, list(rows[0])))
    path = write_json("burst_floor", {"args": vars(args), "rounds": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
