"""The starts of a rate-limited queue counted at the start (`QueueStartRate`), beside its
claims (`JobQueue.rate_tat`). Each row is rewritten by every start of its queue: half-empty
pages and a vacuum every 200 dead rows keep it a page or two, as the heartbeat rows."""

from django.db import migrations, models

STORAGE = """
ALTER TABLE tasksapp_queuestartrate SET (fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200)
"""


def set_storage(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(STORAGE)


class Migration(migrations.Migration):
    dependencies = [
        ("tasksapp", "0029_claims_count_their_attempt"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueStartRate",
            fields=[
                ("queue", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("tat", models.DateTimeField()),
            ],
        ),
        migrations.RunPython(set_storage, migrations.RunPython.noop),
    ]
