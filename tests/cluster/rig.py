"""A multi-host rig on one machine: simulated hosts as Linux network namespaces, each
joined to this host by a veth pair of its own, each running a dispatcher and a worker.
PostgreSQL and Redis (the rig's own servers) listen on this host's end of every pair, so
each host reaches them over its own link, which the rig can cut and heal (packets
dropped both ways, no FIN, no RST: a partition, not a refused connection).

Used by tests/cluster and bench/cluster. Needs root and iproute2; cutting links needs
iptables inside the namespaces.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.cluster.delay_proxy import DelayProxy
from tests.netns_addresses import choosing_addresses, free_prefix
from tests.processes.support import Cluster, PrivatePostgres, PrivateRedis, migrate


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def rig_unavailable() -> str | None:
    """Why no rig can be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"tempo-probe-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as exc:
        return f"cannot make a network namespace: {exc.stderr.decode().strip()}"
    try:
        subprocess.run(
            ["ip", "netns", "exec", probe, "iptables", "-L", "-n"], check=True, capture_output=True
        )
    except subprocess.CalledProcessError as exc:
        return f"iptables does not work in a namespace: {exc.stderr.decode().strip()}"
    finally:
        _ip("netns", "delete", probe)
    return None


@dataclass
class Host:
    """One simulated host: a namespace and its link (a /30: .1 here, .2 inside)."""

    name: str
    ns: str
    host_if: str
    ns_if: str
    gateway: str  # this machine's end: where the host reaches the servers
    address: str  # the host's own address

    def create(self) -> None:
        _ip("netns", "add", self.ns)
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        _ip("link", "set", self.ns_if, "netns", self.ns)
        _ip("addr", "add", f"{self.gateway}/30", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.address}/30", "dev", self.ns_if)
        _ip("-n", self.ns, "link", "set", self.ns_if, "up")
        _ip("-n", self.ns, "link", "set", "lo", "up")

    def destroy(self) -> None:
        subprocess.run(["ip", "link", "delete", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "delete", self.ns], capture_output=True)

    def _drop_rules(self, port: int) -> list[list[str]]:
        return [
            ["OUTPUT", "-p", "tcp", "-d", self.gateway, "--dport", str(port), "-j", "DROP"],
            ["INPUT", "-p", "tcp", "-s", self.gateway, "--sport", str(port), "-j", "DROP"],
        ]

    def cut(self, port: int) -> None:
        """Drop every packet between this host and a server's port, both ways."""
        for rule in self._drop_rules(port):
            self._iptables("-A", *rule)

    def heal(self, port: int) -> None:
        for rule in self._drop_rules(port):
            self._iptables("-D", *rule)

    def lose(self, share: float) -> None:
        """Drop this share of the host's incoming packets, at random (a lossy link)."""
        rule = ["INPUT", "-m", "statistic", "--mode", "random", "--probability", str(share)]
        self._iptables("-A", *rule, "-j", "DROP")

    def _iptables(self, *args: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.ns, "iptables", *args], check=True)


class Rig:
    """`hosts` simulated hosts, a PostgreSQL and a Redis of the rig's own, and on each
    host a `Cluster` whose processes run in its namespace."""

    def __init__(
        self, *, hosts: int, logs: Path, round_trip_ms: float = 0.0, **settings: str
    ) -> None:
        self.host_count = hosts
        self.network = ""  # 172.N.0.0/16, chosen at start among those free then
        self.hosts: list[Host] = []
        self.logs = logs
        # Latency between the hosts and the servers: a delaying proxy on each host's link
        # (this kernel may lack `tc netem`), half the round trip each way.
        self.round_trip_ms = round_trip_ms
        self.proxies: list[DelayProxy] = []
        self.settings = settings
        self.postgres: PrivatePostgres | None = None
        self.redis: PrivateRedis | None = None
        self.clusters: dict[str, Cluster] = {}

    def _make_hosts(self) -> None:
        """Choose a free 172.16/12 network (no clash with a rig of a suite running beside,
        nor with the other tests' namespaces) and make the hosts' links in it."""
        tag = uuid.uuid4().hex[:5]
        with choosing_addresses():
            prefix = free_prefix([f"172.{net}." for net in range(16, 32)])
            self.network = f"{prefix}0.0/16"
            self.hosts = [
                Host(
                    name=f"h{i}",
                    ns=f"tempo-{tag}-h{i}",
                    host_if=f"tr{tag}h{i}",
                    ns_if=f"tn{tag}h{i}",
                    gateway=f"{prefix}{i}.1",
                    address=f"{prefix}{i}.2",
                )
                for i in range(1, self.host_count + 1)
            ]
            for host in self.hosts:
                host.create()

    def start(self) -> Rig:
        try:
            self._make_hosts()
            gateways = [host.gateway for host in self.hosts]
            self.postgres = PrivatePostgres(
                listen_addresses=",".join(["127.0.0.1", *gateways]),
                trusted_network=self.network,
            ).start()
            migrate(self.postgres.url)
            self.redis = PrivateRedis(bind=" ".join(["127.0.0.1", *gateways])).start()
            for host in self.hosts:
                pg_port, redis_port = self._ports(host)
                self.clusters[host.name] = Cluster(
                    database_url=f"postgres://postgres@{host.gateway}:{pg_port}/tempo",
                    broker_url=f"redis://{host.gateway}:{redis_port}/0",
                    queue="tempo",
                    logs=self.logs,
                    netns=host.ns,
                    **self.settings,
                )
        except BaseException:
            self.stop()
            raise
        return self

    def _ports(self, host: Host) -> tuple[int, int]:
        """Where a host reaches PostgreSQL and Redis: the servers themselves, or delaying
        proxies listening on its link."""
        assert self.postgres is not None and self.redis is not None
        if not self.round_trip_ms:
            return self.postgres.port, self.redis.port
        ports = []
        for port in (self.postgres.port, self.redis.port):
            proxy = DelayProxy(
                target=f"127.0.0.1:{port}",
                delay_ms=self.round_trip_ms / 2,
                listen=f"{host.gateway}:0",
            )
            self.proxies.append(proxy)
            ports.append(proxy.port)
        return ports[0], ports[1]

    def host(self, name: str) -> Host:
        return next(host for host in self.hosts if host.name == name)

    def dispatcher(self, host: str) -> None:
        self.clusters[host].dispatcher(f"d-{host}")

    def worker(self, host: str, **options) -> None:
        self.clusters[host].worker(f"w-{host}", **options)

    def pid(self, process: str) -> int:
        host = process.split("-", 1)[1]
        return self.clusters[host].processes[process].pid

    def connect(self) -> psycopg.Connection:
        """The test's own connection, over loopback (never cut)."""
        assert self.postgres is not None
        return psycopg.connect(self.postgres.url, autocommit=True)

    def cut_postgres(self, host: str) -> None:
        assert self.postgres is not None
        self.host(host).cut(self.postgres.port)

    def heal_postgres(self, host: str) -> None:
        assert self.postgres is not None
        self.host(host).heal(self.postgres.port)

    def cut_redis(self, host: str) -> None:
        assert self.redis is not None
        self.host(host).cut(self.redis.port)

    def heal_redis(self, host: str) -> None:
        assert self.redis is not None
        self.host(host).heal(self.redis.port)

    def stop(self) -> None:
        for cluster in self.clusters.values():
            for process in cluster.processes.values():
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=10)
        for proxy in self.proxies:
            proxy.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()
        for host in self.hosts:
            host.destroy()
