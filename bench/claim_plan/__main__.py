"""The hot statements under three kinds of table statistics, in the form the engine runs
them now beside their two earlier forms (bench/claim_plan/earlier.py).

    python -m bench.claim_plan [--jobs 14000 50000] [--repeat 5]

For each count of jobs, a fresh table of that many jobs of the queue "api", then:
- no statistics: never analysed (a new table's first minute, before autovacuum);
- fresh statistics: analysed with the jobs in the state the statement looks for;
- stale statistics: analysed while all were finished, then all put in that state (a
  flood newer than the statistics, or a burst's jobs analysed before they were claimed).
Statements: a limited queue's claim of 10 of 100 candidates (without and with a
concurrency limit), claims of 1 and 1,000 ids, starts of 1 and 250 ids (a message's
batch), a success of 250. Each runs up to `--repeat` times in a transaction rolled back
(once only where it takes over a second); the best time is reported.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

CONDITIONS = ("no statistics", "fresh statistics", "stale statistics")
FORMS = ("partial", "joined", "now")  # earlier.PARTIAL_*, earlier.JOINED_*, the engine's
SLOW_MS = 1000


def cases(sql) -> list[dict]:
    """name, the state its rows are in, its statement's name, parameters from the ids:
    `listed` for the earlier forms (tokens and results as lists), `now` for the engine's."""

    def limited(limit):
        def params(ids):
            return {
                "queue": "api",
                "ids": ids[:100],
                "owner": "bench",
                "ttl": 10,
                "lead": 0.04,
                "room": 10,
                "limit": limit,
                "key_limit": None,
            }

        return {"listed": params, "now": params}

    def claim(count):
        def params(ids):
            return {"ids": ids[:count], "owner": "bench", "ttl": 10, "lead": 0.04}

        return {"listed": params, "now": params}

    def start(count):
        common = {"worker": "bench", "ttl": 6, "lead": 1}
        return {
            "listed": lambda ids: {"ids": ids[:count], "tokens": [0] * count, **common},
            "now": lambda ids: {
                **sql.fenced_params([(i, 0) for i in ids[:count]]),
                **common,
            },
        }

    def success(count):
        return {
            "listed": lambda ids: {
                "ids": ids[:count],
                "tokens": [0] * count,
                "results": ['{"ok": true}'] * count,
                "began_ms": [None] * count,
            },
            "now": lambda ids: sql.outcome_params(
                [(i, 0, {"ok": True}, None) for i in ids[:count]]
            ),
        }

    return [
        {
            "name": "limited claim, 10 of 100",
            "state": "scheduled",
            "statement": "CLAIM_LIMITED",
            **limited(None),
        },
        {
            "name": "limited claim, limit 20",
            "state": "scheduled",
            "statement": "CLAIM_LIMITED",
            **limited(20),
        },
        {"name": "claim of 1 id", "state": "scheduled", "statement": "CLAIM_DUE", **claim(1)},
        {
            "name": "claim of 1,000 ids",
            "state": "scheduled",
            "statement": "CLAIM_DUE",
            **claim(1000),
        },
        {"name": "start of 1 id", "state": "claimed", "statement": "START_CLAIMED", **start(1)},
        {
            "name": "start of 250 ids",
            "state": "claimed",
            "statement": "START_CLAIMED",
            **start(250),
        },
        {
            "name": "success of 250 ids",
            "state": "running",
            "statement": "SUCCEED_RUNNING",
            **success(250),
        },
    ]


def best_ms(conn, statement: str, params: dict, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        conn.execute("BEGIN")
        began = time.perf_counter()
        conn.execute(statement, params).fetchall()
        times.append((time.perf_counter() - began) * 1000)
        conn.execute("ROLLBACK")
        if times[-1] > SLOW_MS:
            break
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[14_000, 50_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from bench.common import SERVER_URL, BenchDatabase, django_on, table, write_json

    django_on(f"{SERVER_URL}/postgres")  # for the statements' text: no query through Django
    from bench.claim_plan import earlier
    from bench.routing.__main__ import INSERT, SPAN
    from tasksapp.engine.db import JOB_TABLE
    from tasksapp.engine.store import postgres_sql as sql

    rows = []
    for jobs in args.jobs:
        for condition in CONDITIONS:
            for state in ("scheduled", "claimed", "running"):
                with BenchDatabase("tempo_bench_claim_plan") as db, db.connect() as conn:
                    first = "succeeded" if condition == "stale statistics" else state
                    conn.execute(
                        INSERT.replace("'scheduled'", f"'{first}'"),
                        {
                            "handler": SPAN,
                            "payload": "{}",
                            "run_at": "2026-01-01",
                            "queue": "api",
                            "priority": 5,
                            "n": jobs,
                        },
                    )
                    if condition != "no statistics":
                        conn.execute(f"ANALYZE {JOB_TABLE}")
                    if condition == "stale statistics":
                        conn.execute(f"UPDATE {JOB_TABLE} SET state = %s", [state])
                    ids = [
                        r[0]
                        for r in conn.execute(
                            f"SELECT id FROM {JOB_TABLE} ORDER BY id LIMIT 1000"
                        ).fetchall()
                    ]
                    for case in cases(sql):
                        if case["state"] != state:
                            continue
                        row = {"jobs": jobs, "statistics": condition, "statement": case["name"]}
                        for form in FORMS:
                            text = (
                                getattr(sql, case["statement"])
                                if form == "now"
                                else getattr(earlier, f"{form.upper()}_{case['statement']}")
                            )
                            params = case["now" if form == "now" else "listed"](ids)
                            row[f"{form} ms"] = round(best_ms(conn, text, params, args.repeat), 2)
                        row["joined / now"] = round(row["joined ms"] / row["now ms"], 1)
                        rows.append(row)
                        print(row, flush=True)
    print(table(rows, list(rows[0])))
    path = write_json("claim_plan", {"args": vars(args), "rows": rows})
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
