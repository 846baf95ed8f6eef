"""Text search of the job list (tasksapp.web.selectors.jobs): trigram indexes over the
last error, the idempotency key and the payload as JSON text, so that a search for
`ILIKE '%text%'` over all jobs reads index entries instead of the table
(docs/decisions/0019-job-text-search-by-trigram-indexes.md).

Each index leaves out the jobs in flight (claimed, running), as migration 0019 does for
the run-time indexes: a claim and a start write no trigram entry (a payload has hundreds)
and the search reads those few jobs through job_lease_idx. The indexes are PostgreSQL's
(pg_trgm, a trusted extension: the database's owner may create it); they are not declared
on the model, and SQLite (the embedded mode) searches by a plain scan.

Built CONCURRENTLY, without a long lock on a large jobs table; an index an interrupted
build left invalid is dropped and built again. Reversing drops the indexes and keeps the
extension (something else may use it)."""

from django.db import migrations

NOT_IN_FLIGHT = "WHERE NOT (state IN ('claimed', 'running'))"
INDEXES = {
    "job_error_trgm_idx": "last_error gin_trgm_ops",
    "job_key_trgm_idx": "idempotency_key gin_trgm_ops",
    "job_payload_trgm_idx": "((payload)::text) gin_trgm_ops",
}
INVALID = """
SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = ANY(%s) AND NOT i.indisvalid
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    execute = schema_editor.execute
    execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(INVALID, [list(INDEXES)])
        left_invalid = [name for (name,) in cursor.fetchall()]
    for name in left_invalid:
        execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    for name, column in INDEXES.items():
        execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} "
            f"ON tasksapp_job USING gin ({column}) {NOT_IN_FLIGHT}"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    # The latest migration: 0021_recurring_audience came after 0022_alerts (it depends on it).
    dependencies = [("tasksapp", "0021_recurring_audience")]
    operations = [migrations.RunPython(create, drop)]
