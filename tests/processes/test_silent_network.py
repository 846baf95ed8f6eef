"""A dead peer behind a silent network: no FIN, no RST, its packets just stop.

A process in a network namespace of the test's own holds a session-level advisory lock
(what a dispatcher holds for each partition it owns) on a PostgreSQL server of the
test's own, connected with the engine's connection settings. Then the namespace's link
drops every packet. The server must notice and release the lock within the keepalive
bound (idle 10 s + 3 probes 5 s apart = 25 s, plus slack), and the process itself must
get an error instead of hanging, so a survivor can take over the partitions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.netns_addresses import choosing_addresses, free_prefix
from tests.processes.support import ROOT, PrivatePostgres, wait_for

pytestmark = pytest.mark.processes
LOCK_KEY = 424242
RELEASE_BOUND_S = 45.0  # 25 s of keepalives, with slack for a loaded machine

HOLDER = """
import os, sys, time
import django
os.environ["DJANGO_SETTINGS_MODULE"] = "schedapp.settings"
django.setup()
import psycopg
from django.db import connection

params = connection.get_connection_params()
params.pop("cursor_factory", None)
params.pop("context", None)
with psycopg.connect(**params, autocommit=True) as conn:
    conn.execute("SELECT pg_advisory_lock(%s)", [int(sys.argv[1])])
    print("locked", flush=True)
    started = time.monotonic()
    try:
        while True:
            conn.execute("SELECT 1")
            time.sleep(1)
    except psycopg.Error as exc:
        print(f"error after {time.monotonic() - started:.1f} s: {type(exc).__name__}", flush=True)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _can_make_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    probe = f"tempo-probe-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as exc:
        return f"cannot make a network namespace: {exc.stderr.decode().strip()}"
    _ip("netns", "delete", probe)
    return None


class SilentHost:
    """A network namespace joined to this host by a veth pair, on a /30 of its own."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ns = f"tempo-{tag}"
        self.host_if, self.ns_if = f"tvh{tag}", f"tvn{tag}"
        self.host_ip = self.ns_ip = ""  # on a /30 of 10.213/16 free when entered

    def __enter__(self) -> SilentHost:
        with choosing_addresses():
            prefix = free_prefix([f"10.213.{octet}." for octet in range(256)])
            self.host_ip, self.ns_ip = f"{prefix}1", f"{prefix}2"
            _ip("netns", "add", self.ns)
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _ip("link", "set", self.ns_if, "netns", self.ns)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        _ip("-n", self.ns, "link", "set", self.ns_if, "up")
        _ip("-n", self.ns, "link", "set", "lo", "up")
        return self

    def go_silent(self) -> None:
        """Every packet between the namespace and this host is discarded from now on, on
        both sides, without a word (blackhole routes: no ICMP, no RST)."""
        _ip("route", "add", "blackhole", f"{self.ns_ip}/32")
        _ip("-n", self.ns, "route", "add", "blackhole", f"{self.host_ip}/32")

    def __exit__(self, *exc) -> None:
        subprocess.run(
            ["ip", "route", "delete", "blackhole", f"{self.ns_ip}/32"], capture_output=True
        )
        subprocess.run(["ip", "link", "delete", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "delete", self.ns], capture_output=True)


@pytest.fixture
def silent_host():
    reason = _can_make_namespaces()
    if reason:
        pytest.skip(reason)
    with SilentHost() as host:
        yield host


@pytest.fixture
def reachable_postgres(silent_host):
    """A private server that also listens on the host's end of the veth pair."""
    server = PrivatePostgres(
        listen_addresses=f"127.0.0.1,{silent_host.host_ip}",
        trusted_network=f"{silent_host.host_ip.rsplit('.', 1)[0]}.0/30",
    ).start()
    yield server
    server.stop()


def _lock_held(conn: psycopg.Connection) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND granted",
        [LOCK_KEY],
    ).fetchone()
    return row[0] > 0


def test_a_dead_peer_behind_a_silent_network_loses_its_locks(
    silent_host, reachable_postgres, tmp_path: Path
):
    """Bound: the server releases the lock within 45 s of the cut (measured: see the
    failure table in docs/ARCHITECTURE.md)."""
    url = f"postgres://postgres@{silent_host.host_ip}:{reachable_postgres.port}/tempo"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SECRET_KEY": "test-only-" * 6,
        "PYTHONPATH": str(ROOT),
    }
    log = tmp_path / "holder.log"
    with open(log, "wb") as out:
        holder = subprocess.Popen(
            ["ip", "netns", "exec", silent_host.ns, sys.executable, "-c", HOLDER, str(LOCK_KEY)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        with psycopg.connect(reachable_postgres.url, autocommit=True) as watcher:
            wait_for(lambda: _lock_held(watcher), timeout=30, message="lock taken in the ns")
            silent_host.go_silent()
            cut = time.monotonic()
            wait_for(
                lambda: not _lock_held(watcher),
                timeout=RELEASE_BOUND_S,
                interval=0.5,
                message="the server releasing the silent peer's lock",
            )
            released_after = time.monotonic() - cut
            # Another session can take the lock now: a survivor takes over the partition.
            assert watcher.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY]).fetchone()[0]
        holder.wait(timeout=RELEASE_BOUND_S)  # the holder itself got an error, not a hang
        output = log.read_text()
        assert "locked" in output and "error after" in output, output
        assert released_after > 5  # it was the keepalives, not something at once
        print(f"lock released {released_after:.1f} s after the cut; holder: {output!r}")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
