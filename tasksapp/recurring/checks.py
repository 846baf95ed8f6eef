"""`manage.py check --database <Tempo's alias>` (and `migrate`) reports recurring tasks
whose audience is read from another database than Tempo's: planning cannot join it with
Tempo's tables, so their members no longer follow it (docs/PLANNING.md)."""

from __future__ import annotations

from django.core.checks import Error, Tags, register
from django.db import connections

from tasksapp.engine.db import tempo_alias
from tasksapp.recurring.audiences import (
    AudienceDatabaseError,
    AudienceError,
    audience_queryset,
    check_same_database,
)
from tasksapp.recurring.models import RecurringTask

E_AUDIENCE_DATABASE = "Recurring task {name!r}: {error}"
H_AUDIENCE_DATABASE = (
    "Route the audience's model to Tempo's database, or deactivate the task (an audience "
    "cannot be removed from a task; a new task without one runs for plain members)."
)


@register(Tags.database)
def check_audience_databases(app_configs=None, databases=None, **kwargs) -> list[Error]:
    alias = tempo_alias()
    if alias not in (databases or []):
        return []
    if RecurringTask._meta.db_table not in connections[alias].introspection.table_names():
        return []  # not migrated yet (`migrate` runs this check before it migrates)
    tasks = (
        RecurringTask.objects.filter(active=True)
        .exclude(audience="")
        .values_list("name", "audience", "audience_filter")
    )
    errors = []
    for name, label, filters in tasks:
        try:
            check_same_database(audience_queryset(label, filters))
        except AudienceDatabaseError as exc:
            message = E_AUDIENCE_DATABASE.format(name=name, error=exc)
            errors.append(Error(message, hint=H_AUDIENCE_DATABASE, id="tempo.E022"))
        except AudienceError:
            continue  # a model or function gone: the audience pass logs it
    return errors
