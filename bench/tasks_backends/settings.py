"""The bench's Django project: Tempo's Tasks backend and django-tasks-db's side by side,
on one PostgreSQL database (BENCH_TASKS_DATABASE_URL) and one Redis (BENCH_TASKS_BROKER_URL),
the same task functions (bench.tasks_backends.tasks) for both.

    TASKS["default"]  tasksapp.backends.TempoBackend   (manage.py tempo_dispatcher, tempo_worker)
    TASKS["db"]       django_tasks_db.DatabaseBackend  (manage.py db_worker --backend db)

Both backends' processes keep their database connections (CONN_MAX_AGE): db_worker would
otherwise open one for every task it runs.
"""

import environ

env = environ.Env()

SECRET_KEY = "bench-only-" * 5
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["localhost"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "bench.tasks_backends.urls"

INSTALLED_APPS = [
    "django.contrib.admin",  # Tempo registers its admin pages
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_tasks",
    "django_celery_beat",
    "rest_framework",
    "tasksapp",
    "django_tasks_db",
]

# What the admin's checks ask for (a project of `startproject` has them).
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": env.db_url("BENCH_TASKS_DATABASE_URL")}
DATABASES["default"]["CONN_MAX_AGE"] = 600

TASKS = {
    "default": {"BACKEND": "tasksapp.backends.TempoBackend"},
    "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
}
TEMPO_TASK_MODULES = ["bench.tasks_backends.tasks"]
CELERY_BROKER_URL = env.str("BENCH_TASKS_BROKER_URL")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
