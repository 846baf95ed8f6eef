"""The hot statements under three kinds of table statistics: each as the engine runs it
(its rows reached by primary-key probes) beside the plain form it replaced.

    python -m bench.claim_plan [--jobs 14000 50000] [--repeat 5]

For each count of jobs, a fresh table of that many jobs of the queue "api", then:
- no statistics: never analysed (a new table's first minute, before autovacuum);
- fresh statistics: analysed with the jobs in the state the statement looks for;
- stale statistics: analysed while all were finished, then all put in that state (a
  flood newer than the statistics).
Statements: a limited queue's claim of 10 of 100 candidates (without and with a
concurrency limit), a claim of 1 id and of 1,000, a start of 1 id. Each runs `--repeat`
times in a transaction rolled back; the best time is reported, and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

CONDITIONS = ("no statistics", "fresh statistics", "stale statistics")


def plain(statement: str, probed_test: str, plain_test: str) -> str:
    """The statement as it was: its state test plain, so that the partial index applies."""
    assert probed_test in statement, "the statement changed"
    return statement.replace(probed_test, plain_test)


def plain_limited_claim(statement: str, job_table: str, due: str) -> str:
    """The limited claim as it was: candidates joined, the update's state test plain."""
    probe = statement[
        statement.index(
            "    FROM unnest(%(ids)s::bigint[]) AS t(id)\n    CROSS JOIN LATERAL"
        ) : statement.index("    WHERE j.state IN")
    ]
    joined = f"    FROM unnest(%(ids)s::bigint[]) AS t(id) JOIN {job_table} j ON j.id = t.id\n"
    return plain(
        statement.replace(probe, joined), f"(j.state IN ({due})) IS TRUE", f"j.state IN ({due})"
    )


def cases(sql, job_table: str) -> list[dict]:
    """name, the state its rows are in, the two statements, its parameters from the ids."""
    due, claimed = sql.DUE, sql.CLAIMED

    def limited(limit):
        return lambda ids: {
            "queue": "api",
            "ids": ids[:100],
            "owner": "bench",
            "ttl": 10,
            "lead": 0.04,
            "room": 10,
            "limit": limit,
            "key_limit": None,
        }

    return [
        {
            "name": "limited claim, 10 of 100",
            "state": "scheduled",
            "probe": sql.CLAIM_LIMITED,
            "plain": plain_limited_claim(sql.CLAIM_LIMITED, job_table, due),
            "params": limited(None),
        },
        {
            "name": "limited claim, limit 20",
            "state": "scheduled",
            "probe": sql.CLAIM_LIMITED,
            "plain": plain_limited_claim(sql.CLAIM_LIMITED, job_table, due),
            "params": limited(20),
        },
        {
            "name": "claim of 1 id",
            "state": "scheduled",
            "probe": sql.CLAIM_DUE,
            "plain": plain(sql.CLAIM_DUE, f"(j.state IN ({due})) IS TRUE", f"j.state IN ({due})"),
            "params": lambda ids: {"ids": ids[:1], "owner": "bench", "ttl": 10, "lead": 0.04},
        },
        {
            "name": "claim of 1,000 ids",
            "state": "scheduled",
            "probe": sql.CLAIM_DUE,
            "plain": plain(sql.CLAIM_DUE, f"(j.state IN ({due})) IS TRUE", f"j.state IN ({due})"),
            "params": lambda ids: {"ids": ids[:1000], "owner": "bench", "ttl": 10, "lead": 0.04},
        },
        {
            "name": "start of 1 id",
            "state": "claimed",
            "probe": sql.START_CLAIMED,
            "plain": plain(
                sql.START_CLAIMED, f"(j.state = {claimed}) IS TRUE", f"j.state = {claimed}"
            ),
            "params": lambda ids: {
                "ids": ids[:1],
                "tokens": [0],
                "worker": "bench",
                "ttl": 6,
                "lead": 1,
            },
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
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[14_000, 50_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from bench.common import SERVER_URL, BenchDatabase, django_on, table, write_json

    django_on(f"{SERVER_URL}/postgres")  # for the statements' text: no query through Django
    from bench.routing.__main__ import INSERT, SPAN
    from tasksapp.engine.sql import JOB_TABLE
    from tasksapp.engine.store import postgres_sql as sql

    rows = []
    for jobs in args.jobs:
        for condition in CONDITIONS:
            for state in ("scheduled", "claimed"):
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
                    for case in cases(sql, JOB_TABLE):
                        if case["state"] != state:
                            continue
                        params = case["params"](ids)
                        plain_ms = best_ms(conn, case["plain"], params, args.repeat)
                        probe_ms = best_ms(conn, case["probe"], params, args.repeat)
                        row = {
                            "jobs": jobs,
                            "statistics": condition,
                            "statement": case["name"],
                            "plain ms": round(plain_ms, 2),
                            "probe ms": round(probe_ms, 2),
                            "plain / probe": round(plain_ms / probe_ms, 1),
                        }
                        rows.append(row)
                        print(row, flush=True)
    print(table(rows, list(rows[0])))
    path = write_json("claim_plan", {"args": vars(args), "rows": rows})
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
