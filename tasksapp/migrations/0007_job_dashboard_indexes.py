from django.db import migrations

# Indexes the dashboard's reads need (tasksapp.web.selectors.dashboard, .jobs). They are not
# declared on Job because the INCLUDE columns and the partial conditions are PostgreSQL's;
# SQLite (the embedded mode) gets plain indexes on the same columns.
POSTGRES = [
    # Start lag percentiles, retries started: a range of started_at, read from the index.
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_started_at_idx ON tasksapp_job "
    "(started_at) INCLUDE (run_at, attempts, state) WHERE started_at IS NOT NULL",
    # Throughput and failures per minute: a range of finished_at with the final state.
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_finished_at_idx ON tasksapp_job "
    "(finished_at) INCLUDE (state) WHERE finished_at IS NOT NULL",
    # The job list without a state or handler filter: keyset pages by (run_at, id).
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_run_at_id_idx ON tasksapp_job (run_at, id)",
]
OTHERS = [
    "CREATE INDEX IF NOT EXISTS job_started_at_idx ON tasksapp_job (started_at)",
    "CREATE INDEX IF NOT EXISTS job_finished_at_idx ON tasksapp_job (finished_at)",
    "CREATE INDEX IF NOT EXISTS job_run_at_id_idx ON tasksapp_job (run_at, id)",
]
DROP = ["job_started_at_idx", "job_finished_at_idx", "job_run_at_id_idx"]


def create(apps, schema_editor):
    statements = POSTGRES if schema_editor.connection.vendor == "postgresql" else OTHERS
    for statement in statements:
        schema_editor.execute(statement)


def drop(apps, schema_editor):
    for name in DROP:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY: no long lock on a large jobs table

    dependencies = [("tasksapp", "0006_roles")]
    operations = [migrations.RunPython(create, drop)]
