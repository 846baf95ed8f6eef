"""A limited queue's claim under three kinds of table statistics: the statement as the
engine runs it (each candidate probed by primary key) beside the plain join it replaced.

    python -m bench.claim_plan [--due 14000 50000] [--candidates 100] [--repeat 5]

For each count of due jobs, a fresh table of that many jobs of the queue "api", then:
- no statistics: never analysed (a new table's first minute, before autovacuum);
- fresh statistics: analysed with the jobs due;
- stale statistics: analysed while none was due (all finished), then all made due (a
  flood newer than the statistics).
Each statement claims 10 of `--candidates` ids, without and with a concurrency limit,
`--repeat` times in a transaction rolled back; the best time is reported, and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

CONDITIONS = ("no statistics", "fresh statistics", "stale statistics")


def plain_join(statement: str, job_table: str, due: str) -> str:
    """The statement before the probes: candidates joined, the update's state test plain."""
    probe = statement[
        statement.index(
            "    FROM unnest(%(ids)s::bigint[]) AS t(id)\n    CROSS JOIN LATERAL"
        ) : statement.index("    WHERE j.state IN")
    ]
    joined = f"    FROM unnest(%(ids)s::bigint[]) AS t(id) JOIN {job_table} j ON j.id = t.id\n"
    fenced = f"(j.state IN ({due})) IS TRUE"
    assert probe in statement and fenced in statement, "the claim statement changed"
    return statement.replace(probe, joined).replace(fenced, f"j.state IN ({due})")


def best_ms(conn, statement: str, params: dict, repeat: int) -> tuple[float, int]:
    times, rows = [], 0
    for _ in range(repeat):
        conn.execute("BEGIN")
        began = time.perf_counter()
        rows = len(conn.execute(statement, params).fetchall())
        times.append((time.perf_counter() - began) * 1000)
        conn.execute("ROLLBACK")
    return min(times), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--due", type=int, nargs="+", default=[14_000, 50_000])
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from bench.common import SERVER_URL, BenchDatabase, django_on, table, write_json

    django_on(f"{SERVER_URL}/postgres")  # for the statements' text: no query through Django
    from bench.routing.__main__ import INSERT, SPAN
    from tasksapp.engine.sql import JOB_TABLE
    from tasksapp.engine.store import postgres_sql as sql

    statements = {
        "probe": sql.CLAIM_LIMITED,
        "plain join": plain_join(sql.CLAIM_LIMITED, JOB_TABLE, sql.DUE),
    }
    rows_out = []
    for due in args.due:
        for condition in CONDITIONS:
            with BenchDatabase("tempo_bench_claim_plan") as db, db.connect() as conn:
                first_state = "'succeeded'" if condition == "stale statistics" else "'scheduled'"
                conn.execute(
                    INSERT.replace("'scheduled'", first_state),
                    {
                        "handler": SPAN,
                        "payload": "{}",
                        "run_at": "2026-01-01",
                        "queue": "api",
                        "priority": 5,
                        "n": due,
                    },
                )
                if condition != "no statistics":
                    conn.execute(f"ANALYZE {JOB_TABLE}")
                if condition == "stale statistics":
                    conn.execute(f"UPDATE {JOB_TABLE} SET state = 'scheduled'")
                ids = [
                    r[0]
                    for r in conn.execute(
                        f"SELECT id FROM {JOB_TABLE} ORDER BY id LIMIT %s", [args.candidates]
                    ).fetchall()
                ]
                for limit in (None, 20):
                    params = {
                        "queue": "api",
                        "ids": ids,
                        "owner": "bench",
                        "ttl": 10,
                        "lead": 0.04,
                        "room": 10,
                        "limit": limit,
                        "key_limit": None,
                    }
                    ms = {
                        name: best_ms(conn, s, params, args.repeat)[0]
                        for name, s in statements.items()
                    }
                    row = {
                        "due jobs": due,
                        "statistics": condition,
                        "limit": "none" if limit is None else limit,
                        "plain join ms": round(ms["plain join"], 2),
                        "probe ms": round(ms["probe"], 2),
                        "join / probe": round(ms["plain join"] / ms["probe"], 1),
                    }
                    rows_out.append(row)
                    print(row, flush=True)
    print(table(rows_out, list(rows_out[0])))
    path = write_json("claim_plan", {"args": vars(args), "rows": rows_out})
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
