from django.db import migrations

# The built-in handlers moved with the code into feature packages; jobs and recurring
# tasks stored before name them by their old dotted paths.
MOVED = {
    "tasksapp.planning.handlers.sync_member": "tasksapp.recurring.handlers.sync_member",
    "tasksapp.demo.greet": "tasksapp.demo.handlers.greet",
    "tasksapp.demo.flaky": "tasksapp.demo.handlers.flaky",
}


def rename(apps, paths):
    for model in ("Job", "RecurringTask"):
        manager = apps.get_model("tasksapp", model).objects
        for old, new in paths.items():
            manager.filter(handler=old).update(handler=new)


def forwards(apps, schema_editor):
    rename(apps, MOVED)


def backwards(apps, schema_editor):
    rename(apps, {new: old for old, new in MOVED.items()})


class Migration(migrations.Migration):
    dependencies = [("tasksapp", "0009_merge_dispatch_mode_graphs")]
    operations = [migrations.RunPython(forwards, backwards)]
