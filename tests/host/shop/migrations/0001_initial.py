from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Run",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=100)),
                ("value", models.CharField(blank=True, default="", max_length=100)),
                ("at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
