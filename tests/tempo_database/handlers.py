"""Handlers that write on both databases: one row on Tempo's, one on the default one."""

from django.db import connections

from tasksapp.engine.handlers import job_handler

EFFECTS = (
    "CREATE TABLE IF NOT EXISTS test_split_effects ("
    " id bigserial PRIMARY KEY, job_id bigint NOT NULL, in_transaction boolean NOT NULL)"
)


def effects_table(alias: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute(EFFECTS)


def _write(alias: str, job_id: int) -> None:
    db = connections[alias]
    with db.cursor() as cursor:
        cursor.execute(
            "INSERT INTO test_split_effects (job_id, in_transaction) VALUES (%s, %s)",
            [job_id, db.in_atomic_block],
        )


@job_handler
def write_both(ctx):
    _write("tempo", ctx.job_id)
    _write("default", ctx.job_id)
    if ctx.payload.get("fail"):
        raise RuntimeError("failed after writing")
    return {"job": ctx.job_id}
