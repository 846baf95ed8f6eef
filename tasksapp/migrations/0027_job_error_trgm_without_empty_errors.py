"""The last error's trigram index leaves out the jobs without an error: most jobs end
without one, and each of their successes wrote an empty entry into the index (GIN
indexes empty and null values too), a third of the trigram indexes' WAL of a
no-op job. The search asks for `last_error <> ''` beside its `ILIKE`, so the index still
serves it (docs/decisions/0019-job-text-search-by-trigram-indexes.md).

Built CONCURRENTLY under a new name before the old index is dropped: the search has an
index at every moment. Reversing builds the index of migration 0023 again."""

from django.db import migrations

NOT_IN_FLIGHT = "NOT (state IN ('claimed', 'running'))"
COLUMN = "last_error gin_trgm_ops"


def _rebuild(schema_editor, *, condition: str) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    execute = schema_editor.execute
    execute("DROP INDEX CONCURRENTLY IF EXISTS job_error_trgm_new_idx")  # an interrupted try
    execute(
        "CREATE INDEX CONCURRENTLY job_error_trgm_new_idx "
        f"ON tasksapp_job USING gin ({COLUMN}) WHERE {condition}"
    )
    execute("DROP INDEX CONCURRENTLY IF EXISTS job_error_trgm_idx")
    execute("ALTER INDEX job_error_trgm_new_idx RENAME TO job_error_trgm_idx")


def leave_out_empty_errors(apps, schema_editor):
    _rebuild(schema_editor, condition=f"{NOT_IN_FLIGHT} AND last_error <> ''")


def keep_every_job(apps, schema_editor):
    _rebuild(schema_editor, condition=NOT_IN_FLIGHT)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [("tasksapp", "0026_worker_slowest_handler")]
    operations = [migrations.RunPython(leave_out_empty_errors, keep_every_job)]
