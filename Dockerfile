# One image for every Tempo process; docker-compose.yml chooses the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# procps: pgrep, for the process health checks of dispatcher and beat.
RUN apt-get update \
    && apt-get install -y --no-install-recommends procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.lock ./
# Every file checked against its hash in the lock.
RUN pip install --require-hashes -r requirements.lock
COPY pyproject.toml manage.py ./
COPY schedapp schedapp
COPY tasksapp tasksapp
# Globs, so the build does not fail while either folder is still empty (git keeps no
# empty folders); BuildKit allows a glob that matches nothing.
COPY [t]emplates templates/
COPY [s]tatic static/
RUN mkdir -p templates static
RUN pip install --no-deps . && rm -rf build *.egg-info

RUN useradd --create-home --uid 10001 tempo && mkdir var && chown tempo var
USER tempo
# whitenoise serves the collected files (STATIC_ROOT = var/staticfiles) from gunicorn.
# A throwaway key: settings refuse a short one; collectstatic signs nothing.
RUN DJANGO_SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    python manage.py collectstatic --noinput

EXPOSE 8000
CMD ["gunicorn", "schedapp.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
