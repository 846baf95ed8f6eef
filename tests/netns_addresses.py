"""Addresses for the network namespaces the tests make.

Another copy of the suite, or a bench, may be making namespaces on this machine at the
same moment: two links given the same address break each other's connections (the
servers then see a stranger or nobody). So addresses are chosen among those no
interface uses, under a lock held until the new links have theirs.
"""

from __future__ import annotations

import contextlib
import fcntl
import random
import subprocess
from collections.abc import Iterator

LOCK_PATH = "/tmp/tempo-test-netns.lock"


@contextlib.contextmanager
def choosing_addresses() -> Iterator[None]:
    """Hold while choosing addresses and until the links carry them."""
    with open(LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def free_prefix(candidates: list[str]) -> str:
    """One of the candidate prefixes (such as "172.20.") that no IPv4 address of this
    machine's interfaces starts with; call within `choosing_addresses()`."""
    in_use = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    free = [prefix for prefix in candidates if f" {prefix}" not in in_use]
    if not free:
        raise RuntimeError(f"every address range for test namespaces is in use: {candidates}")
    return random.choice(free)
