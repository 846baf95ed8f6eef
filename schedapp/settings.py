"""Settings: every environment variable is read here, once, with a typed helper.

Defaults are safe for development (SQLite, a broker that needs no server); production
sets DATABASE_URL, CELERY_BROKER_URL and DJANGO_SECRET_KEY (required when DEBUG is off).
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(environ.Env().str("TEMPO_DATA_DIR", default=str(BASE_DIR / "var")))

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DJANGO_DEBUG", default=False)
EMBEDDED = env.bool("TEMPO_EMBEDDED", default=False)
if DEBUG or EMBEDDED:
    SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="insecure-development-only-key")
else:
    SECRET_KEY = env.str("DJANGO_SECRET_KEY")  # no default: fail fast in production
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "rest_framework",
    "drf_spectacular",
    "tasksapp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "schedapp.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "libraries": {"tempo": "tasksapp.web.templatetags.tempo"},
        },
    },
]
WSGI_APPLICATION = "schedapp.wsgi.application"

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'tempo.sqlite3'}")
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + immediate transactions: several local processes write without "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
LOGIN_URL = "/login/"

# --- HTTP API (tasksapp/web/api, docs/DASHBOARD.md)----------------------------------
REST_FRAMEWORK = {
    # API tokens for programs, stored hashed (dashboard "API tokens" page or
    # `manage.py api_token_create <user> --name ...`); the session of a logged-in operator
    # works too, with its CSRF check.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tasksapp.web.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["tasksapp.web.api.permissions.ViewOrOperate"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "tasksapp.web.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tempo API",
    "DESCRIPTION": "Schedule jobs, manage members and recurring tasks (docs/DASHBOARD.md).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("TEMPO_LOG_LEVEL", default="INFO")},
}

# --- Celery -------------------------------------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    _broker_dir = DATA_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.05,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_SEND_TASK_EVENTS = env.bool("TEMPO_CELERY_EVENTS", default=True)
CELERY_TASK_SEND_SENT_EVENT = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fixup closes every database connection around every task unless this is
# set; a job would pay a new connection (5-10 ms) each time. Tasks call Django's
# close_old_connections() instead, which keeps healthy connections (CONN_MAX_AGE).
CELERY_DB_REUSE_MAX = 1_000_000
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE

# --- The scheduler ------------------------------------------------------------------
TEMPO = {
    # How far ahead one poll looks, and how often a dispatcher polls at the latest.
    "LOOKAHEAD_SECONDS": env.float("TEMPO_LOOKAHEAD_SECONDS", default=300.0),
    "POLL_INTERVAL_SECONDS": env.float("TEMPO_POLL_INTERVAL_SECONDS", default=240.0),
    # Without LISTEN/NOTIFY (SQLite) new work is found by this short poll instead.
    "FALLBACK_POLL_SECONDS": env.float("TEMPO_FALLBACK_POLL_SECONDS", default=0.5),
    "POLL_LIMIT": env.int("TEMPO_POLL_LIMIT", default=50_000),
    "PARTITIONS": env.int("TEMPO_PARTITIONS", default=16),
    "COORDINATION_SECONDS": env.float("TEMPO_COORDINATION_SECONDS", default=2.0),
    # Claim this many ms ahead of run_at to hide the broker hop (never starts early).
    "DISPATCH_LEAD_MS": env.int("TEMPO_DISPATCH_LEAD_MS", default=40),
    # A claimed job must be started by a worker within this time, or it is returned.
    "CLAIM_TTL_SECONDS": env.float("TEMPO_CLAIM_TTL_SECONDS", default=10.0),
    # A running job's lease; the worker renews it every third of it.
    "RUN_LEASE_SECONDS": env.float("TEMPO_RUN_LEASE_SECONDS", default=6.0),
    # Most job ids in one broker message, and how many messages a due batch is split into.
    "MAX_BATCH": env.int("TEMPO_MAX_BATCH", default=250),
    "FANOUT": env.int("TEMPO_FANOUT", default=32),
    # Handlers of one batch run side by side on this many threads per worker process
    # (1: one after another). Pair a value > 1 with `celery worker -c 1`.
    "BATCH_PARALLELISM": env.int("TEMPO_BATCH_PARALLELISM", default=1),
    # Backpressure: claim only while fewer messages than this wait in the queue.
    "MAX_QUEUED_MESSAGES": env.int("TEMPO_MAX_QUEUED_MESSAGES", default=64),
    "QUEUE": env.str("TEMPO_QUEUE", default="tempo"),
    # Dispatchers and workers commit asynchronously (tasksapp/engine/sessions.py).
    "ASYNC_COMMIT": env.bool("TEMPO_ASYNC_COMMIT", default=True),
    # The per-job statements are prepared once per session (tasksapp/engine/sessions.py).
    "PREPARED_STATEMENTS": env.bool("TEMPO_PREPARED_STATEMENTS", default=True),
    # "database": dispatchers poll and hold due jobs in memory (the default);
    # "redis": a Redis due index says what is due (docs/ARCHITECTURE.md, dispatch modes).
    "DISPATCH_MODE": env.str("TEMPO_DISPATCH_MODE", default="database"),
    "INDEX_REDIS_URL": env.str("TEMPO_INDEX_REDIS_URL", default=CELERY_BROKER_URL),
    # Key prefix of the index; by default the queue name, so clusters never share one.
    "INDEX_PREFIX": env.str("TEMPO_INDEX_PREFIX", default=""),
    # How often the index takes in jobs due beyond the notify window (jobs-table reads).
    "INDEX_SYNC_SECONDS": env.float("TEMPO_INDEX_SYNC_SECONDS", default=300.0),
    # How often an idle dispatcher asks the index (and so notices an emptied Redis).
    "INDEX_CHECK_SECONDS": env.float("TEMPO_INDEX_CHECK_SECONDS", default=1.0),
    # A take not confirmed within this time is returned to the index by any instance.
    "INDEX_LEASE_SECONDS": env.float("TEMPO_INDEX_LEASE_SECONDS", default=5.0),
    "INDEX_RETURN_SECONDS": env.float("TEMPO_INDEX_RETURN_SECONDS", default=2.0),
    # Largest payload and result a job may carry, in bytes of JSON text, and the deepest
    # nesting of either (tasksapp/engine/jsonvalues.py); larger ones are refused.
    "MAX_PAYLOAD_BYTES": env.int("TEMPO_MAX_PAYLOAD_BYTES", default=1_048_576),
    "MAX_RESULT_BYTES": env.int("TEMPO_MAX_RESULT_BYTES", default=1_048_576),
    "MAX_JSON_DEPTH": env.int("TEMPO_MAX_JSON_DEPTH", default=32),
}
TEMPO["INDEX_PREFIX"] = TEMPO["INDEX_PREFIX"] or f"{TEMPO['QUEUE']}:"

# Web processes keep their connection between requests for this long; dispatchers and
# workers keep theirs for their lifetime (tasksapp.engine.sessions.use_engine_sessions).
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=600)

# --- Probabilistic planning (tasksapp.recurring, docs/PLANNING.md) --------------------
TEMPO_PLANNING = {
    # How new members get their phase: "golden" (low-discrepancy, even) or "random".
    "PHASE_STRATEGY": env.str("TEMPO_PHASE_STRATEGY", default="golden"),
    # Each planner run plans every slice that starts before now + this. The beat runs the
    # planner daily, so one day plus slack: a late beat run still finds everything planned.
    "HORIZON_SECONDS": env.float("TEMPO_PLANNING_HORIZON_SECONDS", default=26 * 3600.0),
    # Catch-up after an outage: an occurrence at most this far in the past is still
    # planned (it runs at once); older ones are counted as missed, never run in a burst.
    "LATE_GRACE_SECONDS": env.float("TEMPO_PLANNING_LATE_GRACE_SECONDS", default=900.0),
}

# --- Job handlers (tasksapp.engine.handlers) -----------------------------------------
# Modules that declare job handlers with @job_handler, imported at start-up by every
# process, besides the `job_handlers` module of each installed app. Only registered
# handlers can be scheduled or run.
TEMPO_HANDLER_MODULES = env.list(
    "TEMPO_HANDLER_MODULES", default=["tasksapp.demo.handlers", "tasksapp.recurring.handlers"]
)

# --- Task graphs (tasksapp.graphs, docs/GRAPHS.md) -----------------------------------
# Modules that register graph tasks, imported at start-up by every process, besides the
# `graph_tasks` module of each installed app.
TEMPO_GRAPH_TASK_MODULES = env.list(
    "TEMPO_GRAPH_TASK_MODULES", default=["tasksapp.demo.graph_tasks"]
)
