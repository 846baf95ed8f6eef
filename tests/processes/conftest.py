import psycopg
import pytest
from django.db import connection

from tests.processes.support import EFFECTS_TABLE, Cluster


def database_url() -> str:
    settings = connection.settings_dict
    return (
        f"postgres://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:"
        f"{settings['PORT'] or 5432}/{settings['NAME']}"
    )


@pytest.fixture
def db_url(transactional_db) -> str:
    return database_url()


@pytest.fixture
def sql(db_url):
    """An autocommit connection of the test's own to the database the processes use."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(EFFECTS_TABLE)
        conn.execute("TRUNCATE test_effects")
        yield conn


@pytest.fixture
def cluster(db_url, broker_url, queue_name, tmp_path):
    running = Cluster(database_url=db_url, broker_url=broker_url, queue=queue_name, logs=tmp_path)
    yield running
    running.stop()
