"""`manage.py check --database default` (and `migrate`, which runs the database checks)
reports jobs still to run whose handler no process registers: they would fail with
"not registered" when due. Nothing is imported to find out."""

from __future__ import annotations

from django.core.checks import Tags, Warning, register
from django.db import connections
from django.db.models import Count

from tasksapp.engine.handlers import registry
from tasksapp.engine.models import Job
from tasksapp.engine.models.jobs import DUE_STATES, LEASED_STATES

SHOWN = 10


def unregistered_waiting_handlers(using: str = "default") -> dict[str, int]:
    """{handler: jobs} for jobs not yet finished whose handler is not registered."""
    counts = (
        Job.objects.using(using)
        .filter(state__in=[*DUE_STATES, *LEASED_STATES])
        .exclude(handler__in=list(registry))
        .values_list("handler")
        .order_by("handler")
        .annotate(jobs=Count("id"))
    )
    return dict(counts)


@register(Tags.database)
def check_stored_handlers(app_configs=None, databases=None, **kwargs) -> list[Warning]:
    warnings = []
    for alias in databases or []:
        if Job._meta.db_table not in connections[alias].introspection.table_names():
            continue  # not migrated yet (`migrate` runs this check before it migrates)
        missing = unregistered_waiting_handlers(alias)
        if not missing:
            continue
        shown = ", ".join(f"{name} ({jobs} jobs)" for name, jobs in list(missing.items())[:SHOWN])
        more = f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else ""
        warnings.append(
            Warning(
                f"Jobs waiting to run name handlers that are not registered: {shown}{more}.",
                hint="Declare them with @job_handler in a module listed in "
                "TEMPO_HANDLER_MODULES, or cancel those jobs; as they are they fail with "
                "'not registered' when due.",
                id="tempo.W001",
            )
        )
    return warnings
