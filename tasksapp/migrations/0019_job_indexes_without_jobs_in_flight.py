from django.db import migrations, models
from django.db.models import Q

# The three indexes the dashboard reads by state, by handler and by run time lose the
# jobs in flight (claimed, running): a claim and a start then write no entry in them,
# three index entries fewer on each of a job's hottest updates. Those few jobs are read
# through job_lease_idx instead (tasksapp.web.selectors). On PostgreSQL each index is
# built beside the old one, without a long lock, and takes its name once built.
LEASED = ["claimed", "running"]
NOT_LEASED = "WHERE NOT (state IN ('claimed', 'running'))"
INDEXES = {
    "job_state_run_at_idx": "(state, run_at)",
    "job_handler_run_at_idx": "(handler, run_at)",
    "job_run_at_id_idx": "(run_at, id)",
}


def _rebuild(schema_editor, where: str) -> None:
    execute = schema_editor.execute
    for name, columns in INDEXES.items():
        if schema_editor.connection.vendor != "postgresql":
            execute(f"DROP INDEX IF EXISTS {name}")
            execute(f"CREATE INDEX {name} ON tasksapp_job {columns} {where}")
            continue
        built = f"{name}_rebuilt"
        execute(f"DROP INDEX CONCURRENTLY IF EXISTS {built}")  # left by an interrupted run
        execute(f"CREATE INDEX CONCURRENTLY {built} ON tasksapp_job {columns} {where}")
        execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        execute(f"ALTER INDEX {built} RENAME TO {name}")


def leave_out_jobs_in_flight(apps, schema_editor):
    _rebuild(schema_editor, NOT_LEASED)


def take_in_every_job(apps, schema_editor):
    _rebuild(schema_editor, "")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [("tasksapp", "0018_worker_deferred_starts")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(leave_out_jobs_in_flight, take_in_every_job)
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="job", name="job_state_run_at_idx"),
                migrations.RemoveIndex(model_name="job", name="job_handler_run_at_idx"),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=~Q(state__in=LEASED),
                        fields=["state", "run_at"],
                        name="job_state_run_at_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=~Q(state__in=LEASED),
                        fields=["handler", "run_at"],
                        name="job_handler_run_at_idx",
                    ),
                ),
            ],
        )
    ]
