"""The text a search looks for in a job's idempotency key and payload moves to a row of
its own, `tasksapp_job_search`, written once when the job is inserted: neither changes
after that, yet on the jobs table every version of a job wrote its trigram entries again
(no update of a job is HOT), so each job's success wrote hundreds of them, half the WAL
of a no-op job (docs/decisions/0024-search-text-written-once.md).

PostgreSQL's alone, like the trigram indexes (SQLite searches the jobs table itself).
Triggers keep the rows, whatever writes the jobs (the ORM, the store's statements, the
planner's set-based inserts): a statement's inserted jobs get theirs in one INSERT, a
statement's deleted jobs lose theirs in one DELETE, a TRUNCATE empties them, and the
rare update of a key or a payload rewrites its job's row. The triggers come first, then
the rows of the jobs already there; the two trigram indexes are built on the new table
CONCURRENTLY, and only then are the jobs table's two dropped: the search has an index
at every moment. Reversing builds the jobs table's indexes of migration 0023 again."""

from django.db import migrations, models

TABLE = """
CREATE TABLE IF NOT EXISTS tasksapp_job_search (
    job_id bigint PRIMARY KEY,
    idempotency_key text NOT NULL,
    payload text NOT NULL
)
"""
FUNCTIONS = [
    """
CREATE OR REPLACE FUNCTION tasksapp_job_search_added() RETURNS trigger AS $$
BEGIN
  INSERT INTO tasksapp_job_search (job_id, idempotency_key, payload)
  SELECT id, idempotency_key, payload::text FROM added
  ON CONFLICT (job_id) DO UPDATE
    SET idempotency_key = EXCLUDED.idempotency_key, payload = EXCLUDED.payload;
  RETURN NULL;
END
$$ LANGUAGE plpgsql;
""",
    """
CREATE OR REPLACE FUNCTION tasksapp_job_search_removed() RETURNS trigger AS $$
BEGIN
  DELETE FROM tasksapp_job_search s USING removed r WHERE s.job_id = r.id;
  RETURN NULL;
END
$$ LANGUAGE plpgsql;
""",
    """
CREATE OR REPLACE FUNCTION tasksapp_job_search_changed() RETURNS trigger AS $$
BEGIN
  UPDATE tasksapp_job_search
  SET idempotency_key = NEW.idempotency_key, payload = NEW.payload::text
  WHERE job_id = NEW.id;
  RETURN NULL;
END
$$ LANGUAGE plpgsql;
""",
    """
CREATE OR REPLACE FUNCTION tasksapp_job_search_emptied() RETURNS trigger AS $$
BEGIN
  TRUNCATE tasksapp_job_search;
  RETURN NULL;
END
$$ LANGUAGE plpgsql;
""",
]
TRIGGERS = [
    """
CREATE TRIGGER tasksapp_job_search_added AFTER INSERT ON tasksapp_job
REFERENCING NEW TABLE AS added FOR EACH STATEMENT
EXECUTE FUNCTION tasksapp_job_search_added();
""",
    """
CREATE TRIGGER tasksapp_job_search_removed AFTER DELETE ON tasksapp_job
REFERENCING OLD TABLE AS removed FOR EACH STATEMENT
EXECUTE FUNCTION tasksapp_job_search_removed();
""",
    """
CREATE TRIGGER tasksapp_job_search_changed AFTER UPDATE OF idempotency_key, payload
ON tasksapp_job FOR EACH ROW
WHEN (OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key
      OR OLD.payload IS DISTINCT FROM NEW.payload)
EXECUTE FUNCTION tasksapp_job_search_changed();
""",
    """
CREATE TRIGGER tasksapp_job_search_emptied AFTER TRUNCATE ON tasksapp_job
FOR EACH STATEMENT EXECUTE FUNCTION tasksapp_job_search_emptied();
""",
]
# Each trigger is named as the function it runs.
TRIGGER_NAMES = [
    f"tasksapp_job_search_{event}" for event in ("added", "removed", "changed", "emptied")
]
BACKFILL = """
INSERT INTO tasksapp_job_search (job_id, idempotency_key, payload)
SELECT id, idempotency_key, payload::text FROM tasksapp_job
ON CONFLICT (job_id) DO NOTHING
"""
# A payload of `{}` has no trigram: it is left out of its index (the search asks for
# `payload <> '{}'` beside its ILIKE, so the index still serves it).
NEW_INDEXES = {
    "job_search_key_trgm_idx": "(idempotency_key gin_trgm_ops)",
    "job_search_payload_trgm_idx": "(payload gin_trgm_ops) WHERE payload <> '{}'",
}
NOT_IN_FLIGHT = "WHERE NOT (state IN ('claimed', 'running'))"
OLD_INDEXES = {
    "job_key_trgm_idx": "idempotency_key gin_trgm_ops",
    "job_payload_trgm_idx": "((payload)::text) gin_trgm_ops",
}
INVALID = """
SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = ANY(%s) AND NOT i.indisvalid
"""


def _build(schema_editor, table: str, indexes: dict[str, str]) -> None:
    """The GIN indexes {name: definition} on `table`, CONCURRENTLY; an index an
    interrupted build left invalid is dropped and built again."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(INVALID, [list(indexes)])
        left_invalid = [name for (name,) in cursor.fetchall()]
    for name in left_invalid:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    for name, definition in indexes.items():
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} USING gin {definition}"
        )


def move_to_search_rows(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    execute = schema_editor.execute
    execute(TABLE)
    for statement in FUNCTIONS:
        execute(statement)
    for trigger in TRIGGER_NAMES:
        execute(f"DROP TRIGGER IF EXISTS {trigger} ON tasksapp_job")
    for statement in TRIGGERS:
        execute(statement)
    execute(BACKFILL)
    _build(schema_editor, "tasksapp_job_search", NEW_INDEXES)
    for name in OLD_INDEXES:
        execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


def back_to_the_jobs_table(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    execute = schema_editor.execute
    on_jobs = {name: f"({column}) {NOT_IN_FLIGHT}" for name, column in OLD_INDEXES.items()}
    _build(schema_editor, "tasksapp_job", on_jobs)
    for trigger in TRIGGER_NAMES:
        execute(f"DROP TRIGGER IF EXISTS {trigger} ON tasksapp_job")
        execute(f"DROP FUNCTION IF EXISTS {trigger}()")
    execute("DROP TABLE IF EXISTS tasksapp_job_search")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [("tasksapp", "0027_job_error_trgm_without_empty_errors")]
    operations = [
        migrations.RunPython(move_to_search_rows, back_to_the_jobs_table),
        migrations.CreateModel(
            name="JobSearchText",
            fields=[
                ("job_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("idempotency_key", models.TextField()),
                ("payload", models.TextField()),
            ],
            options={"db_table": "tasksapp_job_search", "managed": False},
        ),
    ]
