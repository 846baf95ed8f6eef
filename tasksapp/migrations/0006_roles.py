from django.contrib.auth.management import create_permissions
from django.db import migrations

# tasksapp.web.operators.ROLES, as it was when this migration was written.
VIEW = ["view_dashboard"]
OPERATE = ["view_dashboard", "operate"]
MODELS = [
    "job",
    "member",
    "recurringtask",
    "sliceplan",
    "dispatcher",
    "dispatchercounter",
    "workerprocess",
    "freeordinal",
    "operatoraction",
]
ROLES = {
    "viewer": VIEW + [f"view_{m}" for m in MODELS],
    "operator": OPERATE + [f"view_{m}" for m in MODELS],
}


def install(apps, schema_editor):
    """The two dashboard roles. Permissions are created here first: Django creates them
    only after all migrations ran."""
    tasksapp = apps.get_app_config("tasksapp")
    tasksapp.models_module = True
    create_permissions(tasksapp, apps=apps, verbosity=0)
    tasksapp.models_module = None
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    for name, codenames in ROLES.items():
        group, _ = group_model.objects.get_or_create(name=name)
        group.permissions.add(
            *permission_model.objects.filter(
                content_type__app_label="tasksapp", codename__in=codenames
            )
        )


def remove(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(ROLES)).delete()


class Migration(migrations.Migration):
    """Groups "viewer" (sees everything) and "operator" (may also act)."""

    dependencies = [
        ("tasksapp", "0005_audit"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(install, remove)]
