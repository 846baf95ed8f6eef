from django.db import migrations

from tasksapp import sql


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(sql.NOTIFY_TRIGGER_INSTALL)


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(sql.NOTIFY_TRIGGER_REMOVE)


class Migration(migrations.Migration):
    """Announce due work to dispatchers (LISTEN/NOTIFY) from every path that writes it."""

    dependencies = [("tasksapp", "0001_jobs")]
    operations = [migrations.RunPython(install, remove)]
