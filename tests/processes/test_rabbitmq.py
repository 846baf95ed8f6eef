"""RabbitMQ as the Celery broker: the crash tests of test_crash.py — a dispatcher killed
holding claims, a worker killed mid-run in each delivery mode, a duplicated message —
and the overload tests of test_overload.py — a backlog of slow handlers, a worker frozen
for three claim leases — run again with an AMQP broker. Each module
run gets a virtual host of its own on the shared RabbitMQ, deleted afterwards."""

import shutil
import subprocess
import uuid

import pytest

from tests.processes.test_crash import (  # noqa: F401  (collected here, on RabbitMQ)
    test_a_duplicated_message_does_not_start_a_job_twice,
    test_a_killed_dispatchers_unstarted_claims_are_claimed_again_by_the_survivors,
    test_a_worker_killed_mid_run_per_delivery_mode,
)
from tests.processes.test_overload import (  # noqa: F401  (collected here, on RabbitMQ)
    test_a_worker_stopped_for_three_claim_lifetimes_loses_and_doubles_nothing,
    test_slow_handlers_backlog_runs_every_job_once_without_reclaiming,
)

AMQP = "amqp://guest:guest@127.0.0.1:5672"


def _rabbitmqctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=60, check=False
    )


def _unavailable() -> str | None:
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not installed (Debian's rabbitmq-server)"
    try:
        listed = _rabbitmqctl("list_vhosts")
    except subprocess.TimeoutExpired:
        return "rabbitmqctl did not answer"
    if listed.returncode != 0:
        return f"RabbitMQ is not reachable: {listed.stderr.strip()[:200]}"
    return None


pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable())),
]


@pytest.fixture(scope="module")
def virtual_host():
    name = f"tempo-test-{uuid.uuid4().hex[:8]}"
    _rabbitmqctl("add_vhost", name).check_returncode()
    _rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*").check_returncode()
    yield name
    _rabbitmqctl("delete_vhost", name)


@pytest.fixture
def broker_url(virtual_host) -> str:
    return f"{AMQP}/{virtual_host}"
