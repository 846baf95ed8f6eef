"""A slice of an audience task reads its audience-member rows alone: the member's active
flag kept on them (filled set-based from the members; phases, ordinals and history stay as
they are) and a partial index on (task, phase) of the active ones in place of the index
on (task, phase) of all. On PostgreSQL the index also holds member_id (INCLUDE, which the
model does not declare: SQLite has none) and is built CONCURRENTLY (no long lock on a
large table) before the old one is dropped."""

from django.db import migrations, models
from django.db.models import Q

NEW_INDEX = "audience_member_slice_idx"
OLD_INDEX = "audience_member_phase_idx"
TABLE = "tasksapp_audiencemember"

FILL = f"""
UPDATE {TABLE} am SET active = m.active
FROM tasksapp_member m WHERE m.id = am.member_id AND am.active <> m.active
"""


def fill(apps, schema_editor):
    """The inactive members' rows: one statement (audiences exist on PostgreSQL only)."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FILL)


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {NEW_INDEX} ON {TABLE} (task_id, phase)"
            " INCLUDE (member_id) WHERE active"
        )
    else:  # SQLite: no INCLUDE
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {NEW_INDEX} ON {TABLE} (task_id, phase) WHERE active"
        )
    schema_editor.execute(f"DROP INDEX IF EXISTS {OLD_INDEX}")


def restore_index(apps, schema_editor):
    schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {OLD_INDEX} ON {TABLE} (task_id, phase)")
    schema_editor.execute(f"DROP INDEX IF EXISTS {NEW_INDEX}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [("tasksapp", "0024_recurring_timezone")]

    operations = [
        migrations.AddField(
            model_name="audiencemember",
            name="active",
            field=models.BooleanField(db_default=True, default=True, help_text="The member's."),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(create_index, restore_index)],
            state_operations=[
                migrations.RemoveIndex(model_name="audiencemember", name=OLD_INDEX),
                migrations.AddIndex(
                    model_name="audiencemember",
                    index=models.Index(
                        condition=Q(active=True), fields=["task", "phase"], name=NEW_INDEX
                    ),
                ),
            ],
        ),
    ]
