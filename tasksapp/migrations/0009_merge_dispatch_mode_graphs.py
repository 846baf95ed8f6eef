from django.db import migrations


class Migration(migrations.Migration):
    """Join the two migrations added side by side: dispatch modes and task graphs."""

    dependencies = [("tasksapp", "0008_dispatch_mode"), ("tasksapp", "0008_graphs")]
    operations = []
