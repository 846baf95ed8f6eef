"""Graph tasks used by the tests (names ``test.*``), registered in the default registry.

Every call is logged in the table ``test_graph_calls`` on a connection of its own in
autocommit, so a test counts executions from outside the process that ran them, those
rolled back with a killed worker included. The job's ``has`` steers them (all optional):

- ``key``: tells the calls of one test apart;
- ``fail``: ``{task: n}`` fails the first n runs of the task (``-1``: every run);
  ``{"<task>.rollback": 1}`` makes its rollback hook fail;
- ``sleep``: ``{task: seconds}`` before it returns;
- ``until_cancelled``: ``{task: seconds}``: checks for a cancel request every 0.05 s for
  that long (raising JobCancelled when it comes), logging ``cancelled`` first.

``record_graph_outcome`` is an ``on_complete`` handler: it logs the graph's end (key: the
graph's id, task: its state, kind ``complete``).

Graph ``d``: ``seed → test.a → (test.b, test.c) → test.d``; ``test.e`` needs only
``b``. ``test.fetch`` needs a ``token`` and fails with InvalidToken unless it is
"fresh"; its rescue hook refreshes it. Every task except ``test.fetch`` has a rollback
hook that logs itself.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg
from django.db import connection

from tasksapp.engine.handlers import job_handler
from tasksapp.graphs.context import raise_if_task_cancelled, task_cancel_requested
from tasksapp.graphs.registry import graph_task

CALLS_TABLE = """
CREATE TABLE IF NOT EXISTS test_graph_calls (
    id bigserial PRIMARY KEY, key text NOT NULL, task text NOT NULL, kind text NOT NULL,
    pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())
"""
OPTIONAL = ("key", "fail", "sleep", "until_cancelled")
BARRIERS: dict[str, threading.Barrier] = {}  # in-process tests: task name -> barrier
_local = threading.local()
_opened: list[psycopg.Connection] = []


class TaskBroke(RuntimeError):
    pass


class InvalidToken(RuntimeError):
    pass


def _connection() -> psycopg.Connection:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or getattr(_local, "pid", None) != os.getpid():
        params = connection.get_connection_params()
        for name in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(name, None)
        conn = psycopg.connect(**params, autocommit=True)
        _local.conn, _local.pid = conn, os.getpid()
        _opened.append(conn)
    return conn


def log_call(key: str, task: str, kind: str) -> int:
    """Log one call; return how many calls of this kind the task has had with this key."""
    conn = _connection()
    conn.execute(
        "INSERT INTO test_graph_calls (key, task, kind, pid) VALUES (%s, %s, %s, %s)",
        [key, task, kind, os.getpid()],
    )
    row = conn.execute(
        "SELECT count(*) FROM test_graph_calls WHERE key = %s AND task = %s AND kind = %s",
        [key, task, kind],
    ).fetchone()
    return row[0]


def close() -> None:
    """Close every connection this process opened (in-process tests, after each test)."""
    while _opened:
        _opened.pop().close()
    _local.conn = None


def _behave(name: str, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Any]:
    key = inputs.get("key", "")
    runs = log_call(key, name, "run")
    if name in BARRIERS:
        BARRIERS[name].wait(timeout=10)
    seconds = (inputs.get("sleep") or {}).get(name)
    if seconds:
        time.sleep(seconds)
    _until_cancelled(key, name, (inputs.get("until_cancelled") or {}).get(name))
    fails = (inputs.get("fail") or {}).get(name, 0)
    if fails < 0 or runs <= fails:
        raise TaskBroke(f"{name} run {runs} fails")
    return outputs


def _until_cancelled(key: str, name: str, seconds: float | None) -> None:
    until = time.monotonic() + (seconds or 0)
    while time.monotonic() < until:
        if task_cancel_requested():
            log_call(key, name, "cancelled")
        raise_if_task_cancelled()
        time.sleep(0.05)


@job_handler
def record_graph_outcome(ctx):
    payload = ctx.payload
    log_call(str(payload["graph_run_id"]), payload["state"], "complete")
    return {"seen": payload}


def _rollback(name: str):
    def rollback(inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        log_call(inputs.get("key", ""), name, "rollback")
        if (inputs.get("fail") or {}).get(f"{name}.rollback"):
            raise TaskBroke(f"{name} cannot be undone")

    rollback.__qualname__ = f"rollback_{name.replace('.', '_')}"
    return rollback


rollback_a, rollback_b = _rollback("test.a"), _rollback("test.b")
rollback_c, rollback_d, rollback_e = _rollback("test.c"), _rollback("test.d"), _rollback("test.e")


@graph_task(
    name="test.a", requires=["seed"], provides=["a"], optional=OPTIONAL, rollback=rollback_a
)
def task_a(inputs):
    return _behave("test.a", inputs, {"a": inputs["seed"] + 1})


@graph_task(name="test.b", requires=["a"], provides=["b"], optional=OPTIONAL, rollback=rollback_b)
def task_b(inputs):
    return _behave("test.b", inputs, {"b": inputs["a"] * 10})


@graph_task(name="test.c", requires=["a"], provides=["c"], optional=OPTIONAL, rollback=rollback_c)
def task_c(inputs):
    return _behave("test.c", inputs, {"c": inputs["a"] * 100})


@graph_task(
    name="test.d", requires=["b", "c"], provides=["d"], optional=OPTIONAL, rollback=rollback_d
)
def task_d(inputs):
    return _behave("test.d", inputs, {"d": [inputs["b"], inputs["c"]]})


@graph_task(name="test.e", requires=["b"], provides=["e"], optional=OPTIONAL, rollback=rollback_e)
def task_e(inputs):
    return _behave("test.e", inputs, {"e": inputs["b"] + 1})


def refresh_token(inputs: dict[str, Any], error: BaseException) -> dict[str, Any] | None:
    log_call(inputs.get("key", ""), "test.fetch", "rescue")
    if isinstance(error, InvalidToken):
        return {"token": "fresh"}
    return None


@graph_task(
    name="test.fetch",
    requires=["token"],
    provides=["data"],
    optional=OPTIONAL,
    rescue=refresh_token,
)
def fetch(inputs):
    log_call(inputs.get("key", ""), "test.fetch", "run")
    if inputs["token"] != "fresh":
        raise InvalidToken(f"token {inputs['token']!r} expired")
    return {"data": "fetched"}


# Parameterised tasks (grounded over has["network"]): test.token(network) → test.posts(network).
@graph_task(
    name="test.token",
    params={"network": "network"},
    requires=["seed"],
    provides=["token(network)"],
    optional=OPTIONAL,
)
def network_token(inputs):
    return _behave(
        f"test.token({inputs['network']})", inputs, {"token(network)": f"t-{inputs['network']}"}
    )


def _rollback_posts(inputs, outputs):
    log_call(inputs.get("key", ""), f"test.posts({inputs['network']})", "rollback")


@graph_task(
    name="test.posts",
    params={"network": "network"},
    requires=["token(network)"],
    provides=["posts(network)"],
    optional=OPTIONAL,
    rollback=_rollback_posts,
)
def network_posts(inputs):
    posts = [f"{inputs['network']}:{inputs['token(network)']}:{n}" for n in range(2)]
    return _behave(f"test.posts({inputs['network']})", inputs, {"posts(network)": posts})


# Tasks with their own job options: runs retried before the graph's strategy applies.
@graph_task(
    name="test.flaky",
    requires=["seed"],
    provides=["flaky"],
    optional=OPTIONAL,
    options={"max_attempts": 3, "retry_policy": {"delays": [0]}},
)
def flaky(inputs):
    return _behave("test.flaky", inputs, {"flaky": "ok"})


@graph_task(
    name="test.limited",
    requires=["seed"],
    provides=["limited"],
    optional=OPTIONAL,
    options={"time_limit": 0.5},
)
def limited(inputs):
    return _behave("test.limited", inputs, {"limited": "ok"})


@graph_task(
    name="test.routed",
    requires=["seed"],
    provides=["routed"],
    optional=OPTIONAL,
    options={"queue": "reports", "priority": "high", "concurrency_key": "report-builder"},
)
def routed(inputs):
    return _behave("test.routed", inputs, {"routed": "ok"})
