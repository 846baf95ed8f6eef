"""@task functions (Django's Tasks API) for tests/test_backends.py."""

from django.db import connection
from django_tasks import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def attempt(context) -> int:
    return context.attempt


@task
def fail(message: str) -> None:
    raise LookupError(message)


@task
def write(number: int) -> int:
    """One row in the tests' effects table (tests.handlers.recording) per run."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_effects (job_id, attempt) VALUES (%s, 1)", [number])
    return number


def plain(a: int) -> int:
    return a
