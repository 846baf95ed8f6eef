"""A claim counts its job's attempt (`attempts`), where the start used to.

Every statement then reads the current attempt in `attempts`, started or not (an attempt
that never began is given back when its claim returns); it used to be `attempts` plus one
for a job still claimed. Jobs claimed when this runs have theirs counted now.
"""

from django.db import migrations

COUNTED = "UPDATE tasksapp_job SET attempts = attempts + 1 WHERE state = 'claimed'"
UNCOUNTED = """
UPDATE tasksapp_job SET attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
WHERE state = 'claimed'
"""


def forwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(COUNTED)


def backwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(UNCOUNTED)


class Migration(migrations.Migration):
    dependencies = [
        ("tasksapp", "0028_job_search_rows"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
