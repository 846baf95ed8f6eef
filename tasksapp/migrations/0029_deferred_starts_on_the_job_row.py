"""A job's row says by itself whether its attempt began.

A claim now counts the attempt (`attempts`) and a start, written or deferred, sets the
new `began`; an attempt that never began is given back. A deferred start marks its row
(`began`, the worker in `claimed_by`) where it used to record the job on its worker's
row (`held`, dropped here). The rows already there are brought to that: running ones
began, claimed ones have their attempt counted, and those a worker held began on it.
Stop the workers before migrating: a worker of the release before writes `held`.
"""

from django.db import migrations, models

RUNNING_BEGAN = "UPDATE tasksapp_job SET began = true WHERE state = 'running'"
CLAIMS_COUNTED = "UPDATE tasksapp_job SET attempts = attempts + 1 WHERE state = 'claimed'"
CLAIMS_UNCOUNTED = """
UPDATE tasksapp_job SET attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
WHERE state = 'claimed'
"""
HELD_BEGAN = """
UPDATE tasksapp_job j SET began = true, claimed_by = w.name
FROM tasksapp_workerprocess w, jsonb_each_text(w.held) h
WHERE w.held IS NOT NULL AND j.id = h.key::bigint AND j.lease_token = h.value::bigint
  AND j.state = 'claimed'
"""


def forwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(RUNNING_BEGAN)
        cursor.execute(CLAIMS_COUNTED)
        if schema_editor.connection.vendor == "postgresql":  # the only store that defers
            cursor.execute(HELD_BEGAN)


def backwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(CLAIMS_UNCOUNTED)  # before, a start counted the attempt


class Migration(migrations.Migration):
    dependencies = [
        ("tasksapp", "0028_job_search_rows"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="began",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.RunPython(forwards, backwards),
        migrations.RemoveField(model_name="workerprocess", name="held"),
    ]
