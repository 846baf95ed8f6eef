"""Start times of the peers' no-op tasks, kept outside any broker or database: each
process appends `key due started` (epochs) to a file of its own under STEADY_LAG_DIR,
one write a task, so the bench reads back every start (a task run twice shows twice)
without adding a statement or a broker command to what it measures."""

from __future__ import annotations

import os
import time
from pathlib import Path

_file = None


def record(key: int, due: float) -> None:
    global _file
    started = time.time()
    if _file is None:
        path = Path(os.environ["STEADY_LAG_DIR"]) / f"starts-{os.getpid()}.txt"
        _file = open(path, "a", buffering=1)  # noqa: SIM115 - kept for the process's life
    _file.write(f"{key} {due} {started}\n")


def read(folder: Path) -> list[tuple[int, float, float]]:
    """(key, due, started) of every start recorded under `folder`."""
    starts = []
    for path in folder.glob("starts-*.txt"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:  # a line cut by a kill is left out
                starts.append((int(parts[0]), float(parts[1]), float(parts[2])))
    return starts
