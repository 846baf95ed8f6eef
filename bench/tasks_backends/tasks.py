"""The bench's tasks, declared once and enqueued on either backend: `noop` does nothing,
`write` inserts one row in the database the task runs against (bench_effect), so a run
that happened twice leaves two rows, then works `ms` milliseconds (sleeps)."""

import time

from django.db import connection
from django_tasks import task

INSERT_EFFECT = "INSERT INTO bench_effect (label, key) VALUES (%s, %s)"
EFFECT_TABLE = """
CREATE TABLE IF NOT EXISTS bench_effect (
    id bigserial PRIMARY KEY,
    label text NOT NULL,
    key integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


@task
def noop(label: str, key: int) -> int:
    return key


@task
def write(label: str, key: int, ms: float = 0) -> int:
    with connection.cursor() as cursor:
        cursor.execute(INSERT_EFFECT, [label, key])
    time.sleep(ms / 1000)
    return key
