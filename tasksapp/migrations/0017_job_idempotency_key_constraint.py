"""The idempotency key's uniqueness as a constraint of the model: the same unique index
as before (its name kept), without the pattern-matching index PostgreSQL was given
beside it for `unique=True`, which every write of a job kept up and no query read."""

from django.db import migrations, models

import tasksapp.engine.models.jobs

LIKE_INDEX = "tasksapp_job_idempotency_key_eb9323e7_like"


def drop_like_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {LIKE_INDEX}")


def create_like_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {LIKE_INDEX} "
            "ON tasksapp_job (idempotency_key varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("tasksapp", "0016_worker_liveness"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="idempotency_key",
                    field=models.CharField(
                        default=tasksapp.engine.models.jobs.new_idempotency_key,
                        max_length=200,
                    ),
                ),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.UniqueConstraint(
                        fields=("idempotency_key",), name="tasksapp_job_idempotency_key_key"
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(drop_like_index, create_like_index),
            ],
        ),
    ]
