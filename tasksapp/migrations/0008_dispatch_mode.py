from django.db import migrations, models


class Migration(migrations.Migration):
    """Record each dispatcher's dispatch mode, so the dashboard can warn of a fallback."""

    dependencies = [("tasksapp", "0007_job_dashboard_indexes")]
    operations = [
        migrations.AddField(
            model_name="dispatcher",
            name="dispatch_mode",
            field=models.CharField(default="database", max_length=40),
        ),
    ]
