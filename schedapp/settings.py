"""Settings: every environment variable is read here, once, with a typed helper.

Defaults are safe for development (SQLite, a broker that needs no server); production
sets DATABASE_URL, CELERY_BROKER_URL and a strong DJANGO_SECRET_KEY (required when DEBUG
is off), and TEMPO_BEHIND_HTTPS when served over HTTPS (README, "Security settings").
"""

import datetime as dt
import sys
from pathlib import Path

import environ
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from tasksapp.engine.tuning import TUNING_DEFAULTS

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(environ.Env().str("TEMPO_DATA_DIR", default=str(BASE_DIR / "var")))

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DJANGO_DEBUG", default=False)
EMBEDDED = env.bool("TEMPO_EMBEDDED", default=False)
# Keys that were published (the .env.example placeholder, the development default) sign
# nothing in production, and neither does a short or repetitive one (Django's W009 rule).
KNOWN_SECRET_KEYS = {"replace-with-a-long-random-string", "insecure-development-only-key"}


def secret_key_weakness(key: str) -> str | None:
    """Why `key` may not sign sessions outside DEBUG/embedded mode, or None."""
    if key in KNOWN_SECRET_KEYS or key.startswith("django-insecure-"):
        return "it is a published placeholder"
    if len(key) < 50:
        return f"it has {len(key)} characters (at least 50 needed)"
    if len(set(key)) < 5:
        return "it has fewer than 5 distinct characters"
    return None


if DEBUG or EMBEDDED:
    SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="insecure-development-only-key")
else:
    SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")  # no default: fail fast in production
    if not SECRET_KEY:
        raise ImproperlyConfigured(
            "Set the DJANGO_SECRET_KEY environment variable. On the data of ./bin/run (the"
            " embedded set-up), run manage.py commands as ./bin/manage <command>."
        )
    # A test run (pytest) may use a throwaway key; the processes it starts may not.
    if (weakness := secret_key_weakness(SECRET_KEY)) and "pytest" not in sys.modules:
        raise ImproperlyConfigured(
            f"DJANGO_SECRET_KEY is too weak to run with DEBUG off: {weakness}. Generate one "
            'with: python -c "import secrets; print(secrets.token_urlsafe(50))"'
        )
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

# --- HTTPS and browser protections (README, "Security settings") ----------------------
# Served over HTTPS (directly or behind a TLS-terminating proxy): redirect plain HTTP,
# secure cookies, HSTS. Off by default, and always in embedded mode (./bin/run serves
# http://127.0.0.1:8000, whatever a .env written for docker compose says).
BEHIND_HTTPS = env.bool("TEMPO_BEHIND_HTTPS", default=False) and not EMBEDDED
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=BEHIND_HTTPS)
# Paths (regexes, no leading slash) still answered over plain HTTP, e.g. ^metrics$.
SECURE_REDIRECT_EXEMPT = env.list("DJANGO_SECURE_REDIRECT_EXEMPT", default=[])
SESSION_COOKIE_SECURE = env.bool("DJANGO_SESSION_COOKIE_SECURE", default=BEHIND_HTTPS)
CSRF_COOKIE_SECURE = env.bool("DJANGO_CSRF_COOKIE_SECURE", default=BEHIND_HTTPS)
SECURE_HSTS_SECONDS = env.int(
    "DJANGO_SECURE_HSTS_SECONDS", default=365 * 24 * 3600 if BEHIND_HTTPS else 0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool(
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=BEHIND_HTTPS
)
# Consent to the browsers' HSTS preload list (hstspreload.org; listing needs a submission).
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=BEHIND_HTTPS)
# Only when the proxy in front sets X-Forwarded-Proto itself (and drops the client's):
# then a request it received over HTTPS counts as secure here. Without a proxy that does,
# a client could claim HTTPS; without this setting behind one, SSL redirects would loop.
if env.bool("TEMPO_TRUST_PROXY_SSL_HEADER", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Trusted proxies in front that append the client's address to X-Forwarded-For (0: use
# the connection's address). Login lockout and API throttling key on that address.
TEMPO_PROXY_COUNT = env.int("TEMPO_PROXY_COUNT", default=0)
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = env.str("DJANGO_SECURE_REFERRER_POLICY", default="same-origin")
SESSION_COOKIE_HTTPONLY = True
# django-csp: no inline script or style (templates/ and static/ keep to that).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "frame-ancestors": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
    }
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_tasks",
    "django_celery_beat",
    "rest_framework",
    "drf_spectacular",
    "tasksapp",
    "tasksapp.contrib.redis_index",  # TEMPO_DISPATCH_MODE=redis: the Redis due index
    "csp",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before whitenoise, which answers static files itself: they get these headers too.
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "tasksapp.web.middleware.RefuseNul",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # Last: answers a locked-out login with the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "schedapp.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,  # Tempo's templates come with the tasksapp package
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = "schedapp.wsgi.application"

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'tempo.sqlite3'}")
}
# Tempo's tables on a PostgreSQL database of their own (docs/DEPLOYMENT.md, "Tempo's
# tables on another database"): its URL makes the alias "tempo"; empty, one database.
if env.str("TEMPO_DATABASE_URL", default=""):
    DATABASES["tempo"] = env.db_url("TEMPO_DATABASE_URL")
    TEMPO_DATABASE = "tempo"
    DATABASE_ROUTERS = ["tasksapp.routers.TempoRouter"]
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + immediate transactions: several local processes write without "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
# A connection pooler in transaction mode (PgBouncer `pool_mode = transaction`) between
# every process and PostgreSQL: "transaction"; empty for direct connections (the default).
# Through such a pooler no session state survives a transaction, so Tempo then sets none
# (no prepared statements, no session settings, no server-side cursors), and dispatchers
# keep their advisory locks and LISTEN on TEMPO_SESSION_DATABASE_URL, a direct connection.
TEMPO_DB_POOLER = env.str("TEMPO_DB_POOLER", default="")
TEMPO_SESSION_DATABASE_URL = env.str("TEMPO_SESSION_DATABASE_URL", default="")
for _database in DATABASES.values():
    if _database["ENGINE"] != "django.db.backends.postgresql":
        continue
    _database["DISABLE_SERVER_SIDE_CURSORS"] = bool(TEMPO_DB_POOLER)
    # A peer that vanished behind a silent network (no FIN, no RST) is noticed on both
    # sides: libpq's keepalives and TCP user timeout end this process's connection, and
    # the same settings sent to the server end its backend, releasing the session's
    # advisory locks (a dispatcher's partitions) instead of holding them for hours.
    _idle = env.int("TEMPO_DB_KEEPALIVE_IDLE_SECONDS", default=10)
    _interval = env.int("TEMPO_DB_KEEPALIVE_INTERVAL_SECONDS", default=5)
    _count = env.int("TEMPO_DB_KEEPALIVE_COUNT", default=3)
    _user_timeout_ms = env.int("TEMPO_DB_TCP_USER_TIMEOUT_MS", default=30_000)
    _options = _database.setdefault("OPTIONS", {})
    _options.update(
        {
            "keepalives": 1,
            "keepalives_idle": _idle,
            "keepalives_interval": _interval,
            "keepalives_count": _count,
            "tcp_user_timeout": _user_timeout_ms,
        }
    )
    # Sent as startup options; a pooler that refuses them (PgBouncer without
    # `ignore_startup_parameters = options`) needs TEMPO_DB_SERVER_KEEPALIVES=false.
    # A pooler keeps its own server connections: set their keepalives in its configuration.
    TEMPO_DB_SERVER_OPTIONS = (
        f"-c tcp_keepalives_idle={_idle} -c tcp_keepalives_interval={_interval}"
        f" -c tcp_keepalives_count={_count} -c tcp_user_timeout={_user_timeout_ms}"
    )
    if env.bool("TEMPO_DB_SERVER_KEEPALIVES", default=not TEMPO_DB_POOLER):
        _options["options"] = TEMPO_DB_SERVER_OPTIONS
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# django-axes first: it refuses a locked-out login before any password is checked. It
# needs the request, so authenticate(request, ...) only (tests: client.force_login).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Login lockout (dashboard and admin): after this many failures for one user name from
# one address, that pair is locked for the cool-off; others can still log in.
AXES_FAILURE_LIMIT = env.int("TEMPO_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env.float("TEMPO_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "schedapp.security.client_ip"
AXES_LOCKOUT_CALLABLE = "schedapp.security.lockout_response"
AXES_VERBOSE = False  # no start-up banner in every process's log
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
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
    # JSON with a size (413), depth and number check (400): tasksapp/web/api/parsers.py
    "DEFAULT_PARSER_CLASSES": ["tasksapp.web.api.parsers.GuardedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "tasksapp.web.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # Per user (whichever token or session) and per anonymous address; over the rate:
    # 429 {"detail": ...} with Retry-After. The counts live in the cache (CACHES).
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": env.str("TEMPO_API_RATE_USER", default="600/minute"),
        "anon": env.str("TEMPO_API_RATE_ANON", default="60/minute"),
    },
    "NUM_PROXIES": TEMPO_PROXY_COUNT,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tempo API",
    "DESCRIPTION": "Schedule jobs, manage members and recurring tasks (docs/DASHBOARD.md).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "PREPROCESSING_HOOKS": ["schedapp.schema.api_endpoints_only"],
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
    CELERY_BROKER_TRANSPORT = "schedapp.broker:Transport"  # messages appear whole
    _broker_dir = DATA_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.05,
    }
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # A broker gone silent (no FIN, no RST) must fail a publish or a connect within
    # seconds, not hold a dispatcher for the minutes TCP retransmits take.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "socket_connect_timeout": env.float("TEMPO_BROKER_CONNECT_TIMEOUT_SECONDS", default=3.0),
        "socket_timeout": env.float("TEMPO_BROKER_SOCKET_TIMEOUT_SECONDS", default=3.0),
        "socket_keepalive": True,
        # Kombu's acknowledgement emulation keeps a copy of every message taken in a Redis
        # hash until it is acknowledged, to hand it out again an hour after a lost worker.
        # Tempo never needs that (a lost message's job comes back through its lease), and
        # the copy costs two Redis writes a message on the worker's event loop.
        "ack_emulation": env.bool("TEMPO_BROKER_ACK_EMULATION", default=False),
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Off: three events a task (received, started, succeeded), each a publish from the
# worker's event loop, which also reads the broker: a 50,000-job flood drained 1.2x faster
# without them (docs/BENCHMARKS.md). Tempo's dashboard does not use them; Flower does.
CELERY_WORKER_SEND_TASK_EVENTS = env.bool("TEMPO_CELERY_EVENTS", default=False)
CELERY_TASK_SEND_SENT_EVENT = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fixup closes every database connection around every task unless this is
# set; a job would pay a new connection (5-10 ms) each time. Tasks call Django's
# close_old_connections() instead, which keeps healthy connections (CONN_MAX_AGE).
CELERY_DB_REUSE_MAX = 1_000_000
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE

# --- Cache (API throttle counts) -----------------------------------------------------
# Shared by every web process: CACHE_URL (django-environ: redis://, locmemcache://, ...),
# else the Redis broker's database, else (embedded mode) each process's own memory.
if env.str("CACHE_URL", default=""):
    CACHES = {"default": env.cache_url("CACHE_URL")}
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CELERY_BROKER_URL,
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
CACHES["default"].setdefault("KEY_PREFIX", env.str("TEMPO_CACHE_KEY_PREFIX", default="tempo"))

# --- The scheduler ------------------------------------------------------------------
TEMPO = {
    # How far ahead one poll looks.
    "LOOKAHEAD_SECONDS": env.float("TEMPO_LOOKAHEAD_SECONDS", default=300.0),
    # false: dispatchers on PostgreSQL do not LISTEN; they learn of work only by polling
    # every NOTIFY_OFF_POLL_SECONDS (LOOKAHEAD_SECONDS ahead), so work written at least
    # that long plus the dispatch lead before its run time is claimed on time.
    "DISPATCH_NOTIFY": env.bool("TEMPO_DISPATCH_NOTIFY", default=True),
    "NOTIFY_OFF_POLL_SECONDS": env.float("TEMPO_NOTIFY_OFF_POLL_SECONDS", default=5.0),
    "PARTITIONS": env.int("TEMPO_PARTITIONS", default=16),
    # Claim this many ms ahead of run_at to hide the broker hop (never starts early).
    "DISPATCH_LEAD_MS": env.int("TEMPO_DISPATCH_LEAD_MS", default=40),
    # Jobs at or above the critical priority are claimed this many ms ahead instead: on
    # busy cores their message has reached a worker thread by run_at. Each holds a worker
    # slot that much longer before its run time; below DISPATCH_LEAD_MS: that lead.
    "CRITICAL_LEAD_MS": env.int("TEMPO_CRITICAL_LEAD_MS", default=100),
    # A claimed job must be started by a worker within this time, or it is returned.
    "CLAIM_TTL_SECONDS": env.float("TEMPO_CLAIM_TTL_SECONDS", default=10.0),
    # A running job's lease; the worker renews it every third of it.
    "RUN_LEASE_SECONDS": env.float("TEMPO_RUN_LEASE_SECONDS", default=6.0),
    # Each worker process waits on the next one's liveness lock (a ring, one idle
    # connection each) and, the moment that one dies, tells the dispatchers to check now.
    # With notifications only; false: a periodic check alone, one connection fewer.
    "WORKER_WATCH": env.bool("TEMPO_WORKER_WATCH", default=True),
    # Time limit of an attempt whose job sets none (seconds from the handler's begin). At
    # the limit the lease is no longer renewed and the attempt fails; in a prefork worker
    # the child process running the handler is ended (docs/ARCHITECTURE.md, workers).
    "DEFAULT_TIME_LIMIT_SECONDS": env.float("TEMPO_DEFAULT_TIME_LIMIT_SECONDS", default=300.0),
    # Handlers of one batch run side by side on this many threads per worker process
    # (1: one after another). Pair a value > 1 with `celery worker -c 1`.
    "BATCH_PARALLELISM": env.int("TEMPO_BATCH_PARALLELISM", default=1),
    "QUEUE": env.str("TEMPO_QUEUE", default="tempo"),
    # See TEMPO_DB_POOLER above (docs/DEPLOYMENT.md, connection poolers).
    "DB_POOLER": TEMPO_DB_POOLER,
    "SESSION_DATABASE_URL": TEMPO_SESSION_DATABASE_URL,
    # "database": dispatchers poll and hold due jobs in memory (the default);
    # "redis": a Redis due index says what is due (docs/ARCHITECTURE.md, dispatch modes).
    "DISPATCH_MODE": env.str("TEMPO_DISPATCH_MODE", default="database"),
    "INDEX_REDIS_URL": env.str("TEMPO_INDEX_REDIS_URL", default=CELERY_BROKER_URL),
    # Key prefix of the index; by default the queue name, so clusters never share one.
    "INDEX_PREFIX": env.str("TEMPO_INDEX_PREFIX", default=""),
    # Largest payload and result a job may carry, in bytes of JSON text, and the deepest
    # nesting of either (tasksapp/engine/jsonvalues.py); larger ones are refused.
    "MAX_PAYLOAD_BYTES": env.int("TEMPO_MAX_PAYLOAD_BYTES", default=1_048_576),
    "MAX_RESULT_BYTES": env.int("TEMPO_MAX_RESULT_BYTES", default=1_048_576),
    "MAX_JSON_DEPTH": env.int("TEMPO_MAX_JSON_DEPTH", default=32),
    # Routing (docs/ROUTING.md). A due job waiting to be claimed rises one priority level
    # for every this many seconds past its run time, so the lowest level never starves.
    "PRIORITY_AGING_SECONDS": env.float("TEMPO_PRIORITY_AGING_SECONDS", default=60.0),
    # Degraded mode switches itself on in a dispatcher holding more than this many due,
    # unclaimed jobs for longer than DEGRADED_AFTER_SECONDS (0: never): only jobs at or
    # above the critical priority are claimed until the backlog is below it again.
    "DEGRADED_BACKLOG": env.int("TEMPO_DEGRADED_BACKLOG", default=0),
    "DEGRADED_AFTER_SECONDS": env.float("TEMPO_DEGRADED_AFTER_SECONDS", default=30.0),
}


def _tuning_value(key: str, default: object) -> object:
    """TEMPO_TUNING_<KEY> read as its default's type (a flag where the default is None)."""
    kind = {bool: env.bool, int: env.int, float: env.float}.get(type(default), env.bool)
    return kind(f"TEMPO_TUNING_{key}")


# The engine's tunings are constants (tasksapp/engine/tuning.py), not settings; the test
# suite and the benches override one with TEMPO_TUNING_<KEY>.
TEMPO_TUNING = {
    key: _tuning_value(key, default)
    for key, default in TUNING_DEFAULTS.items()
    if f"TEMPO_TUNING_{key}" in env
}

# Web processes keep their connection between requests for this long; dispatchers and
# workers keep theirs for their lifetime (tasksapp.engine.sessions.use_engine_sessions).
for _database in DATABASES.values():
    _database["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=600)

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

# --- Django's Tasks API (tasksapp.backends) -----------------------------------------
# `@task` functions (django_tasks) run as Tempo jobs. Their modules: each installed app's
# `tasks` module and these.
TASKS = {"default": {"BACKEND": "tasksapp.backends.TempoBackend"}}
TEMPO_TASK_MODULES = env.list("TEMPO_TASK_MODULES", default=[])

# --- Job handlers (tasksapp.engine.handlers) -----------------------------------------
# Modules that declare job handlers with @job_handler, imported at start-up by every
# process, besides Tempo's own and the `job_handlers` module of each installed app. Only
# registered handlers can be scheduled or run.
TEMPO_HANDLER_MODULES = env.list("TEMPO_HANDLER_MODULES", default=["tasksapp.demo.handlers"])

# --- Task graphs (tasksapp.graphs, docs/GRAPHS.md) -----------------------------------
# Modules that register graph tasks, imported at start-up by every process, besides the
# `graph_tasks` module of each installed app.
TEMPO_GRAPH_TASK_MODULES = env.list(
    "TEMPO_GRAPH_TASK_MODULES", default=["tasksapp.demo.graph_tasks"]
)

# --- Retention and rollups (tasksapp.retention, docs/OPERATIONS.md) ------------------
TEMPO_RETENTION = {
    # A finished job is removed this many days after it finished (its rollup stays).
    "SUCCEEDED_DAYS": env.float("TEMPO_RETENTION_SUCCEEDED_DAYS", default=7.0),
    "CANCELLED_DAYS": env.float("TEMPO_RETENTION_CANCELLED_DAYS", default=30.0),
    "DEAD_DAYS": env.float("TEMPO_RETENTION_DEAD_DAYS", default=30.0),
    "LOST_DAYS": env.float("TEMPO_RETENTION_LOST_DAYS", default=30.0),
    # Per handler: {"billing.sync": {"succeeded": 90}}; states not named keep the above.
    "HANDLER_DAYS": env.json("TEMPO_RETENTION_HANDLER_DAYS", default={}),
    # Slice plans after their jobs can no longer retry; finished graph runs with their jobs.
    "SLICE_PLAN_DAYS": env.float("TEMPO_RETENTION_SLICE_PLAN_DAYS", default=30.0),
    "GRAPH_RUN_DAYS": env.float("TEMPO_RETENTION_GRAPH_RUN_DAYS", default=30.0),
    # The operators' audit log.
    "AUDIT_DAYS": env.float("TEMPO_RETENTION_AUDIT_DAYS", default=365.0),
    # Dispatcher and worker rows silent this long; dispatchers' per-minute counters.
    "HEARTBEAT_DAYS": env.float("TEMPO_RETENTION_HEARTBEAT_DAYS", default=7.0),
    "COUNTER_DAYS": env.float("TEMPO_RETENTION_COUNTER_DAYS", default=14.0),
    # Rollups: per-minute ones feed the last hours' charts, per-hour ones the history.
    "MINUTE_ROLLUP_DAYS": env.float("TEMPO_RETENTION_MINUTE_ROLLUP_DAYS", default=14.0),
    "HOUR_ROLLUP_DAYS": env.float("TEMPO_RETENTION_HOUR_ROLLUP_DAYS", default=400.0),
    # Jobs are rolled up once they finished this long ago (a finish still committing
    # is not missed); newer ones are read from the jobs table.
    "ROLLUP_DELAY_SECONDS": env.float("TEMPO_RETENTION_ROLLUP_DELAY_SECONDS", default=300.0),
    # Rows removed per statement, and the pause between statements: no statement holds
    # its row locks for long, and claims go on between them.
    "BATCH_SIZE": env.int("TEMPO_RETENTION_BATCH_SIZE", default=1000),
    "BATCH_PAUSE_SECONDS": env.float("TEMPO_RETENTION_BATCH_PAUSE_SECONDS", default=0.05),
    # A B-tree index of the jobs table keeps pages a few long-kept rows pin after a
    # delete: a run rebuilds (REINDEX CONCURRENTLY) one this many times larger than a
    # fresh build of its entries would be (0: never), if it is at least REINDEX_MIN_MB.
    "REINDEX_BLOAT": env.float("TEMPO_RETENTION_REINDEX_BLOAT", default=1.5),
    "REINDEX_MIN_MB": env.float("TEMPO_RETENTION_REINDEX_MIN_MB", default=32.0),
}
