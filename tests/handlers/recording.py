"""Handlers used by the tests. They record their effects in the database so a test can
count executions from outside the process that ran them."""

import time

from django.db import connection

from tasksapp.engine.handlers import job_handler

NOT_CALLABLE = 42


def _ensure_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS test_effects ("
            " id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL,"
            " executed_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )


@job_handler
def record(ctx):
    """Transactional effect: one row per successful execution."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO test_effects (job_id, attempt) VALUES (%s, %s)", [ctx.job_id, ctx.attempt]
        )
    return {"job": ctx.job_id}


@job_handler
def record_slowly(ctx):
    time.sleep(float(ctx.payload.get("seconds", 0.5)))
    return record(ctx)


@job_handler
def fail_until(ctx):
    """Fails until attempt `ctx.payload['succeed_on']`."""
    if ctx.attempt < int(ctx.payload.get("succeed_on", 10**6)):
        raise RuntimeError(f"attempt {ctx.attempt} fails")
    return record(ctx)


@job_handler
def record_then_fail(ctx):
    """Writes its effect, then raises: the effect rolls back with the attempt."""
    record(ctx)
    raise RuntimeError("failed after its effect")


@job_handler
def record_then_swallow_error(ctx):
    """Writes its effect, then catches the error of a statement that fails: its
    transaction is aborted, so the attempt fails."""
    from django.db import DatabaseError

    record(ctx)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")
    except DatabaseError:
        pass
    return {"job": ctx.job_id}


@job_handler
def record_then_snooze(ctx):
    """Writes its effect, then snoozes a minute: the effect rolls back with the snooze."""
    from tasksapp.engine import Snooze

    record(ctx)
    raise Snooze(60)


@job_handler
def noop(ctx):
    return None


# Declares its own retention ages; TEMPO_RETENTION_HANDLER_DAYS may override them.
KEPT_AGES = {"succeeded": 1, "cancelled": 45}


@job_handler(retention=KEPT_AGES)
def kept(ctx):
    return None


@job_handler
def echo(ctx):
    return {"payload": ctx.payload, "attempt": ctx.attempt, "key": ctx.idempotency_key}


@job_handler
def steal_lease(ctx):
    """Writes its effect, then lets 'another process' take the job over (as the reaper
    and a new claim would): the fenced success must fail and roll the effect back."""
    import psycopg

    record(ctx)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute(
            "UPDATE tasksapp_job SET state = 'claimed', lease_token = lease_token + 1"
            " WHERE id = %s",
            [ctx.job_id],
        )
    return {"stolen": True}


@job_handler
def not_json(ctx):
    return {"when": object()}


@job_handler
def exit_now(ctx):
    """What `sys.exit` as a handler did: SystemExit out of the handler."""
    raise SystemExit(3)


@job_handler
def interrupt(ctx):
    raise KeyboardInterrupt


class UnreadableError(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")


@job_handler
def fail_unreadably(ctx):
    raise UnreadableError


@job_handler
def fail_with_unstorable_text(ctx):
    raise RuntimeError("NUL \x00 and a lone surrogate \ud800 <script>x</script>")


def _deep(levels: int):
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


HOSTILE_RESULTS = {
    "nul": lambda: {"s": "a\x00b"},
    "surrogate": lambda: {"s": "\ud800"},
    "big": lambda: "x" * (2 * 1024 * 1024),
    "object": lambda: {"when": object()},
    "nan": lambda: float("nan"),
    "deep": lambda: _deep(200),
}


@job_handler
def return_hostile(ctx):
    """Returns the result named by payload['kind'], one the jobs table cannot store."""
    return HOSTILE_RESULTS[ctx.payload["kind"]]()


# Tables of record_then_block, created by the process tests (tests/processes/inflight.py).
KEYED_EFFECTS_TABLE = """
CREATE TABLE IF NOT EXISTS test_keyed_effects (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL,
    idempotency_key text NOT NULL, executed_at timestamptz NOT NULL DEFAULT clock_timestamp())
"""
STARTED_TABLE = """
CREATE TABLE IF NOT EXISTS test_started (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp())
"""


def _autocommit_connection():
    import psycopg

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


@job_handler
def record_then_block(ctx):
    """Writes its effect with the idempotency key in the job's own connection (inside the
    job's transaction when transactional, committed at once otherwise), marks the attempt
    started in a connection of its own (visible at once in every mode), then blocks for
    payload['block'] s (600) in its first payload['block_runs'] (1) runs, counted by those
    marks (a transactional run lost with its worker runs again as the same attempt): a
    SIGKILL of its worker then lands while the handler runs."""
    import os

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO test_keyed_effects (job_id, attempt, idempotency_key) VALUES (%s, %s, %s)",
            [ctx.job_id, ctx.attempt, ctx.idempotency_key],
        )
    with _autocommit_connection() as own:
        own.execute(
            "INSERT INTO test_started (job_id, attempt, pid) VALUES (%s, %s, %s)",
            [ctx.job_id, ctx.attempt, os.getpid()],
        )
        (runs,) = own.execute(
            "SELECT count(*) FROM test_started WHERE job_id = %s", [ctx.job_id]
        ).fetchone()
    if runs <= int(ctx.payload.get("block_runs", 1)):
        time.sleep(float(ctx.payload.get("block", 600)))
    return {"job": ctx.job_id, "attempt": ctx.attempt}


# Table of tick_until_limit, created by tests/processes/test_hung_handlers.py.
TICKS_TABLE = """
CREATE TABLE IF NOT EXISTS test_ticks (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp())
"""


@job_handler
def loop_forever(ctx):
    """Never returns: a busy loop only the end of its process stops."""
    n = 0
    while True:
        n += 1


@job_handler
def tick_until_limit(ctx):
    """Writes a row to test_ticks every 0.05 s (its own connection, committed at once) —
    for ever while the attempt is at most payload['hang_attempts'] (1), else for
    payload['seconds'] (0.5) — so a test sees exactly when each attempt was running."""
    import os

    import psycopg

    forever = ctx.attempt <= int(ctx.payload.get("hang_attempts", 1))
    until = time.monotonic() + float(ctx.payload.get("seconds", 0.5))
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as own:
        while forever or time.monotonic() < until:
            own.execute(
                "INSERT INTO test_ticks (job_id, attempt, pid) VALUES (%s, %s, %s)",
                [ctx.job_id, ctx.attempt, os.getpid()],
            )
            time.sleep(0.05)
    return {"attempt": ctx.attempt}


@job_handler
def record_until_cancelled(ctx):
    """Writes its keyed effect (in the job's transaction when transactional), marks the
    attempt started, then checks for a cancel request every 0.05 s for at most
    payload['block'] s (60) and returns if none came."""
    import os

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO test_keyed_effects (job_id, attempt, idempotency_key) VALUES (%s, %s, %s)",
            [ctx.job_id, ctx.attempt, ctx.idempotency_key],
        )
    with _autocommit_connection() as own:
        own.execute(
            "INSERT INTO test_started (job_id, attempt, pid) VALUES (%s, %s, %s)",
            [ctx.job_id, ctx.attempt, os.getpid()],
        )
    until = time.monotonic() + float(ctx.payload.get("block", 60))
    while time.monotonic() < until:
        ctx.raise_if_cancelled()
        time.sleep(0.05)
    return {"job": ctx.job_id, "cancel_seen": ctx.cancel_requested}


@job_handler
def snooze_then_record(ctx):
    """Snoozes payload['seconds'] (1) on each of its first payload['snoozes'] (1) runs,
    counted in test_started; then records its effect. payload['bad'] snoozes with it."""
    import os

    with _autocommit_connection() as own:
        own.execute(
            "INSERT INTO test_started (job_id, attempt, pid) VALUES (%s, %s, %s)",
            [ctx.job_id, ctx.attempt, os.getpid()],
        )
        runs = own.execute(
            "SELECT count(*) FROM test_started WHERE job_id = %s", [ctx.job_id]
        ).fetchone()[0]
    from tasksapp.engine import Snooze

    if "bad" in ctx.payload:
        raise Snooze(ctx.payload["bad"])
    with connection.cursor() as cursor:  # rolled back with a snooze (transactional)
        cursor.execute(
            "INSERT INTO test_keyed_effects (job_id, attempt, idempotency_key) VALUES (%s, %s, %s)",
            [ctx.job_id, ctx.attempt, ctx.idempotency_key],
        )
    if runs <= int(ctx.payload.get("snoozes", 1)):
        raise Snooze(float(ctx.payload.get("seconds", 1)))
    return {"runs": runs, "attempt": ctx.attempt}


# Table of record_run, created by the routing tests and bench/routing.
RUNS_TABLE = """
CREATE TABLE IF NOT EXISTS test_runs (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, tag text NOT NULL,
    began_at timestamptz NOT NULL, ended_at timestamptz)
"""


@job_handler
def record_run(ctx):
    """Records when it began and when it ended (database clock, its own connection,
    committed at once), sleeping payload['seconds'] (0) between: the handlers' own record
    of how many ran at once, whatever Tempo's counters say."""
    with _autocommit_connection() as own:
        (row,) = own.execute(
            "INSERT INTO test_runs (job_id, tag, began_at) VALUES (%s, %s, clock_timestamp())"
            " RETURNING id",
            [ctx.job_id, str(ctx.payload.get("tag", ""))],
        ).fetchone()
        time.sleep(float(ctx.payload.get("seconds", 0)))
        own.execute("UPDATE test_runs SET ended_at = clock_timestamp() WHERE id = %s", [row])
