from django.db import migrations, models

# Retention's index: finished jobs grouped by handler, recurring task ("" for none) and
# state, oldest first. Each group is one range of it, so a group's own age is applied
# without reading the rows other groups keep longer (tasksapp/retention/sql.py). Not
# declared on Job, as 0007's: the expression and CONCURRENTLY are PostgreSQL's.
POSTGRES = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_retention_idx ON tasksapp_job "
    "(handler, (COALESCE(payload ->> 'recurring_task_id', '')), state, finished_at) "
    "WHERE finished_at IS NOT NULL"
)
OTHERS = "CREATE INDEX IF NOT EXISTS job_retention_idx ON tasksapp_job (handler, state, finished_at)"


def create(apps, schema_editor):
    postgres = schema_editor.connection.vendor == "postgresql"
    schema_editor.execute(POSTGRES if postgres else OTHERS)


def drop(apps, schema_editor):
    schema_editor.execute("DROP INDEX IF EXISTS job_retention_idx")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY: no long lock on a large jobs table

    dependencies = [("tasksapp", "0014_merge_routing")]
    operations = [
        migrations.AddField(
            model_name="recurringtask",
            name="retention",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text='Days its finished jobs are kept, per state: {"succeeded": 3, '
                '"dead": 60}. States not named keep the handler\'s or the default ages.',
            ),
        ),
        migrations.RunPython(create, drop),
    ]
