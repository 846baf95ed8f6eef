from django.db import migrations, models


class Migration(migrations.Migration):
    # The latest migration: 0021_recurring_audience is applied after 0022_alerts.
    dependencies = [("tasksapp", "0021_recurring_audience")]

    operations = [
        migrations.AddField(
            model_name="recurringtask",
            name="timezone",
            field=models.CharField(
                default="UTC",
                help_text="IANA time zone whose calendar days the periods follow (whole days "
                "only); UTC: fixed-length periods from the epoch.",
                max_length=64,
            ),
        ),
    ]
