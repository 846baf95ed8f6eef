from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tasksapp", "0023_job_text_search")]

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
