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


# --- Tempo inside a project: what it needs, and what it leaves to the project ---------
W_NO_LOCKOUT = (
    "The dashboard's login has no lockout against password guessing: django-axes is not "
    "in INSTALLED_APPS."
)
H_NO_LOCKOUT = (
    "Add 'axes' to INSTALLED_APPS, 'axes.middleware.AxesMiddleware' to MIDDLEWARE and "
    "'axes.backends.AxesStandaloneBackend' first in AUTHENTICATION_BACKENDS (as "
    "schedapp/settings.py does), or protect the login another way."
)
W_NO_CSP = (
    "Pages are served without a Content-Security-Policy: django-csp's middleware is not "
    "in MIDDLEWARE. The dashboard needs no inline script or style, so a strict policy fits."
)
H_NO_CSP = (
    "Add 'csp' to INSTALLED_APPS and 'csp.middleware.CSPMiddleware' to MIDDLEWARE with a "
    "CONTENT_SECURITY_POLICY such as schedapp/settings.py's."
)
W_LOGIN_URL = "LOGIN_URL ({url}) answers no URL: the dashboard sends anonymous users there."
H_LOGIN_URL = "Set LOGIN_URL = 'dashboard:login' (Tempo's login page) or mount a login view."
W_NO_BROKER = "No message broker is set: Tempo's dispatchers and workers cannot start."
H_NO_BROKER = "Set CELERY_BROKER_URL, for example redis://localhost:6379/0."
E_SETTINGS = "Tempo's settings are invalid: {error}"
E_TASKS_BACKEND = "TASKS['{alias}'] names a backend that cannot be imported: {path} ({error})."
E_DATABASE_ALIAS = "TEMPO_DATABASE names {alias!r}, which is not an alias of DATABASES ({known})."
H_DATABASE_ALIAS = 'Add that database to DATABASES, or leave TEMPO_DATABASE unset ("default").'
E_DATABASE_ROUTER = (
    "TEMPO_DATABASE is {alias!r} but Tempo's models are routed to {routed!r}: no router sends "
    "them to their database."
)
H_DATABASE_ROUTER = 'Add "tasksapp.routers.TempoRouter" to DATABASE_ROUTERS (docs/DEPLOYMENT.md).'


@register(Tags.security)
def check_login_lockout(app_configs=None, **kwargs) -> list[Warning]:
    from django.conf import settings

    if "axes" in settings.INSTALLED_APPS or "axes.apps.AppConfig" in settings.INSTALLED_APPS:
        return []
    return [Warning(W_NO_LOCKOUT, hint=H_NO_LOCKOUT, id="tempo.W010")]


@register(Tags.security)
def check_content_security_policy(app_configs=None, **kwargs) -> list[Warning]:
    from django.conf import settings

    if "csp.middleware.CSPMiddleware" in settings.MIDDLEWARE:
        return []
    return [Warning(W_NO_CSP, hint=H_NO_CSP, id="tempo.W013")]


@register(Tags.urls)
def check_login_url(app_configs=None, **kwargs) -> list[Warning]:
    from django.conf import settings
    from django.shortcuts import resolve_url
    from django.urls import NoReverseMatch, Resolver404, resolve

    url = settings.LOGIN_URL
    if not getattr(settings, "ROOT_URLCONF", None):
        return []  # a project without URLs (only workers and dispatchers): nothing to log in to
    try:
        path = resolve_url(url)
        if path.startswith("/"):
            resolve(path.split("?", 1)[0])
    except (NoReverseMatch, Resolver404):
        return [Warning(W_LOGIN_URL.format(url=url), hint=H_LOGIN_URL, id="tempo.W011")]
    return []


@register()
def check_configuration(app_configs=None, **kwargs) -> list:
    """Settings a typo or an omission would break only once a process starts."""
    from django.conf import settings
    from django.core.checks import Error
    from django.core.exceptions import ImproperlyConfigured
    from django.utils.module_loading import import_string

    from tasksapp.engine.dispatcher.sources.base import due_source_factory
    from tasksapp.engine.settings import TempoSettings, configured
    from tasksapp.engine.worker.celery_app import broker_url, tempo_app

    found: list = []
    try:
        mode = TempoSettings.load().dispatch_mode
        configured("TEMPO_PLANNING")
        configured("TEMPO_RETENTION")
        if mode != "database":
            due_source_factory(mode)  # its app installed
    except (ImproperlyConfigured, ValueError, TypeError) as exc:
        found.append(Error(E_SETTINGS.format(error=exc), id="tempo.E010"))
    for alias, params in (getattr(settings, "TASKS", None) or {}).items():
        path = params.get("BACKEND", "")
        try:
            import_string(path)
        except ImportError as exc:
            message = E_TASKS_BACKEND.format(alias=alias, path=path, error=exc)
            found.append(Error(message, id="tempo.E011"))
    try:
        broker_url(tempo_app())
    except ImproperlyConfigured:
        found.append(Warning(W_NO_BROKER, hint=H_NO_BROKER, id="tempo.W012"))
    return found + tempo_database_errors()


def tempo_database_errors() -> list:
    """TEMPO_DATABASE names a database, and the router sends Tempo's models there."""
    from django.conf import settings
    from django.core.checks import Error
    from django.db import router

    from tasksapp.engine.db import tempo_alias

    alias = tempo_alias()
    if alias not in settings.DATABASES:
        known = ", ".join(sorted(settings.DATABASES))
        message = E_DATABASE_ALIAS.format(alias=alias, known=known)
        return [Error(message, hint=H_DATABASE_ALIAS, id="tempo.E020")]
    routed = router.db_for_write(Job)
    if routed != alias:
        message = E_DATABASE_ROUTER.format(alias=alias, routed=routed)
        return [Error(message, hint=H_DATABASE_ROUTER, id="tempo.E021")]
    return []
