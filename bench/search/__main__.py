"""Job search: the job list's text search over 1,000,000 jobs, without and with the
trigram indexes: the last error's on the jobs table (migrations 0023, 0027), the key's
and the payload's on the jobs' search rows (migration 0028).

    python -m bench.search [--jobs 1000000] [--runs 15] [--runs-without 5]

A database of the bench's own is migrated, the trigram indexes dropped, and N jobs made
by one set-based `INSERT … SELECT generate_series` (its triggers write their search
rows): 30 days of mostly finished jobs (about 93 % succeeded, 3 % dead, 1 % cancelled,
1 % failed and due again), 2 % scheduled ahead and 200 in flight; payloads of 300–400
characters of JSON (a customer id among 50,000, an e-mail address, an order, items, a
note), idempotency keys of three kinds (hex digests, `invoice-…`, `plan:…`), and one of
six kinds of error on the jobs that failed an attempt.
Then each search is run through `job_page` (the dashboard's and the API's one selector,
a first page of 50) `--runs-without` times, the indexes are built CONCURRENTLY as the
migration builds them (timed) and the table analysed, and each search is run `--runs`
times again. Printed per search: the page's rows, p50/p95 in ms, and the plans' reading of
the search rows and of the jobs table for the jobs not in flight (EXPLAIN of the page's
statements).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import sys
import time

from bench.common import BenchDatabase, django_on, summary, table, write_json
from bench.search.data import KEY, PAYLOAD

ERRORS = importlib.import_module("tasksapp.migrations.0027_job_error_trgm_without_empty_errors")
SEARCH_ROWS = importlib.import_module("tasksapp.migrations.0028_job_search_rows")
# Each trigram index as its migration builds it: its table and definition.
INDEXES = {
    "job_error_trgm_idx": (
        "tasksapp_job",
        f"({ERRORS.COLUMN}) WHERE {ERRORS.NOT_IN_FLIGHT} AND last_error <> ''",
    ),
    **{
        name: ("tasksapp_job_search", definition)
        for name, definition in SEARCH_ROWS.NEW_INDEXES.items()
    },
}
TABLES = ("tasksapp_job", "tasksapp_job_search")
FILL = f"""
INSERT INTO tasksapp_job (handler, payload, run_at, created_at, started_at, finished_at,
    state, attempts, max_attempts, retry_policy, delivery, idempotency_key, queue, priority,
    concurrency_key, lease_token, claimed_by, lease_expires_at, last_error, errors)
SELECT handler, payload, run_at, run_at - interval '1 min',
    CASE WHEN state NOT IN ('scheduled', 'claimed') THEN run_at + interval '40 ms' END,
    CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN run_at + interval '90 ms' END,
    state, CASE WHEN state IN ('scheduled', 'claimed') THEN 0 WHEN error = '' THEN 1 ELSE 2 END,
    5, '{{}}', 'at_least_once', key, queue, 5, '', 1, CASE WHEN state = 'claimed' THEN 'd1'
    WHEN state = 'running' THEN 'w1' ELSE '' END,
    CASE WHEN state IN ('claimed', 'running') THEN now() + interval '10 s' END, error,
    CASE WHEN error = '' THEN '[]'::jsonb ELSE jsonb_build_array(jsonb_build_object(
        'attempt', 1, 'at', run_at, 'error', error, 'kind', 'error')) END
FROM (
    SELECT i, state, handler, payload, key, queue,
        CASE WHEN state = 'scheduled' THEN now() + (i - 200) * interval '1 s'
            ELSE now() - i * interval '2.592 s' END AS run_at,
        CASE WHEN state IN ('dead', 'failed') OR (state = 'succeeded' AND i %% 50 = 7)
            THEN (ARRAY[
                'ConnectionRefusedError: [Errno 111] Connection refused (smtp-'
                    || i %% 5 || '.internal:25)',
                'TimeoutError: POST https://api.partner-' || i %% 9
                    || '.example/v2/orders timed out after 30.0 s',
                'CardDeclined: card of customer cus_' || lpad((i %% 50000)::text, 8, '0')
                    || ' declined (insufficient_funds)',
                'DeadlockDetected: deadlock detected, process ' || i %% 30000
                    || ' waits for ShareLock on transaction ' || i,
                'KeyError: ''shipping_address'' in order ord_' || i,
                'HTTPError: 503 Service Unavailable from https://crm.example.com/api/contacts/'
                    || i %% 50000
            ])[1 + (i / 7) %% 6] ELSE '' END AS error
    FROM (
        SELECT i,
            CASE WHEN i <= 100 THEN 'running' WHEN i <= 200 THEN 'claimed'
                WHEN i <= 200 + %(jobs)s / 50 THEN 'scheduled'
                WHEN i %% 100 < 3 THEN 'dead' WHEN i %% 100 = 3 THEN 'cancelled'
                WHEN i %% 100 = 4 THEN 'failed' ELSE 'succeeded' END AS state,
            (ARRAY['billing.charge', 'billing.refund', 'mail.send_receipt', 'mail.digest',
                'reports.build', 'crm.sync_contact', 'crm.merge', 'search.reindex',
                'shipping.label', 'shipping.track', 'webhooks.deliver', 'exports.csv'
            ])[1 + i %% 12] AS handler,
            (ARRAY['default', 'default', 'mail', 'billing'])[1 + i %% 4] AS queue,
            {KEY} AS key,
            {PAYLOAD} AS payload
        FROM generate_series(1, %(jobs)s) AS i
    ) AS base
) AS jobs
"""


def searches(jobs: int) -> list[tuple[str, dict]]:
    """(name, JobFilters keywords) of each search."""
    old = jobs * 9 // 10 // 10 * 10 + 1  # a hex-digest key, 27 days back
    key = hashlib.md5(str(old).encode()).hexdigest()
    return [
        ("one idempotency key (27 days back)", {"text": key}),
        ("one customer id in payloads (20 jobs)", {"text": "cus_00031337"}),
        ("text in errors (0.2 % of jobs)", {"text": "smtp-2.internal"}),
        ("text in errors, second page", {"text": "smtp-2.internal", "page": 2}),
        ("text found nowhere", {"text": "zebra-quartz-404"}),
        ("state dead + text in errors", {"state": "dead", "text": "partner-4.example"}),
        ("state succeeded + customer id", {"state": "succeeded", "text": "cus_00031337"}),
        ("1,000 jobs 28 days back (plan keys)", {"text": f":{old // 5000 + 10}:"}),
        ("common text (every payload)", {"text": "example"}),
        ("two letters (window of 10,000)", {"text": "zq"}),
    ]  # fmt: skip


def page_of(spec: dict):
    from tasksapp.web.selectors.jobs import JobFilters, job_page

    spec = dict(spec)
    pages = spec.pop("page", 1)
    page = job_page(filters=JobFilters(**spec))
    for _ in range(pages - 1):
        page = job_page(filters=JobFilters(**spec), cursor=page.next_cursor)
    return page


def statements_of(spec: dict) -> list[str]:
    """The page's statements (their parameters inlined) that read the search rows and the
    jobs not in flight."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        page_of(spec)
    searched = [q["sql"] for q in queries if 'FROM "tasksapp_job_search"' in q["sql"]]
    statements = [q["sql"] for q in queries if 'FROM "tasksapp_job"' in q["sql"]]
    settled = [s for s in statements if "IN ('claimed', 'running')" not in s or "NOT (" in s]
    return searched[-1:] + (settled or statements)[-1:]


def plan_reading(statement: str) -> str:
    """How the plan reads the jobs table: its scan nodes and the indexes under them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement)
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return "; ".join(_readings(plan))


def _readings(node: dict) -> list[str]:
    if node.get("Relation Name") in TABLES:
        if node["Node Type"] == "Bitmap Heap Scan":
            return [f"{node['Relation Name']}: Bitmap Heap Scan ({' | '.join(_indexes(node))})"]
        reading = f"{node['Node Type']} {node.get('Index Name', '')}".strip()
        return [f"{node['Relation Name']}: {reading}"]
    return [reading for child in node.get("Plans", []) for reading in _readings(child)]


def _indexes(node: dict) -> list[str]:
    own = [node["Index Name"]] if "Index Name" in node else []
    return own + [name for child in node.get("Plans", []) for name in _indexes(child)]


def measure(runs: int, jobs: int) -> dict[str, dict]:
    figures = {}
    for name, spec in searches(jobs):
        page = page_of(spec)  # warm
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            page_of(spec)
            times.append((time.perf_counter() - began) * 1000)
        figures[name] = {
            "rows": len(page.jobs),
            "more": page.next_cursor is not None,
            "plan": "; ".join(map(plan_reading, statements_of(spec))),
            **summary(times),
        }
        print(f"  {name}: p50 {figures[name]['p50']:.1f} ms", file=sys.stderr, flush=True)
    return figures


def fill(conn, jobs: int) -> dict:
    for name in INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {name}")
    began = time.perf_counter()
    conn.execute(FILL, {"jobs": jobs})
    fill_s = time.perf_counter() - began
    for name in TABLES:
        conn.execute(f"VACUUM ANALYZE {name}")
    counts = dict(conn.execute("SELECT state, count(*) FROM tasksapp_job GROUP BY 1").fetchall())
    return {"fill_s": round(fill_s, 1), "states": counts, **sizes(conn)}


def sizes(conn) -> dict:
    heap, indexes, search, search_indexes = conn.execute(
        "SELECT pg_table_size('tasksapp_job'), pg_indexes_size('tasksapp_job'),"
        " pg_table_size('tasksapp_job_search'), pg_indexes_size('tasksapp_job_search')"
    ).fetchone()
    return {
        "table_mib": round(heap / 2**20),
        "indexes_mib": round(indexes / 2**20),
        "search_rows_mib": round(search / 2**20),
        "search_indexes_mib": round(search_indexes / 2**20),
    }


def build_indexes(conn) -> dict:
    built = {}
    for name, (on, definition) in INDEXES.items():
        began = time.perf_counter()
        conn.execute(f"CREATE INDEX CONCURRENTLY {name} ON {on} USING gin {definition}")
        size = conn.execute("SELECT pg_relation_size(%s)", [name]).fetchone()[0]
        built[name] = {"build_s": round(time.perf_counter() - began, 1), "mib": round(size / 2**20)}
    for name in TABLES:
        conn.execute(f"ANALYZE {name}")
    return built


def rows(without: dict, with_: dict) -> list[dict]:
    return [
        {
            "search": name,
            "rows": with_[name]["rows"],
            "without: p50 / p95 ms": f"{without[name]['p50']:.1f} / {without[name]['p95']:.1f}",
            "without: plan": without[name]["plan"],
            "with: p50 / p95 ms": f"{with_[name]['p50']:.1f} / {with_[name]['p95']:.1f}",
            "with: plan": with_[name]["plan"],
        }
        for name in with_
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--runs-without", type=int, default=5)
    args = parser.parse_args()
    with BenchDatabase("bench_search") as db:
        django_on(db.url)
        with db.connect() as conn:
            print(f"making {args.jobs:,} jobs", file=sys.stderr, flush=True)
            made = fill(conn, args.jobs)
            print(f"made: {made}", file=sys.stderr, flush=True)
            without = measure(args.runs_without, args.jobs)
            built = build_indexes(conn)
            print(f"built: {built}", file=sys.stderr, flush=True)
            with_ = measure(args.runs, args.jobs)
            made_after = sizes(conn)
        from django.db import connections

        connections.close_all()
    result = rows(without, with_)
    print(f"\n{args.jobs:,} jobs: {made}\nindexes built: {built}\nafter: {made_after}\n")
    print(table(result, list(result[0])))
    path = write_json(
        "search",
        {
            "args": vars(args),
            "made": made,
            "built": built,
            "after": made_after,
            "without": without,
            "with": with_,
        },
    )
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
