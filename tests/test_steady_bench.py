"""The steady bench's pure parts: starts read back from the peers' files, CPU a job and a
second by process kind, the kinds of a side's processes, the costliest backends."""

import pytest

from bench.steady import lags, report
from bench.steady.meter import kind


def test_each_key_keeps_its_first_start_and_counts_a_second_one():
    recorded = [(0, 10.0, 10.002), (1, 10.5, 10.51), (1, 10.5, 10.7), (7, 1.0, 1.1)]
    counted = report.starts(3, recorded)
    assert counted == {
        "pairs": [(10.0, 10.002), (10.5, 10.51), (None, None)],
        "twice": 1,
        "strays": 1,
    }
    assert report.lags(counted["pairs"]) == {
        "started": 2,
        "not_started": 1,
        "early": 0,
        "lag_p50_ms": 2.0,
        "lag_p99_ms": 10.0,
        "lag_max_ms": 10.0,
    }


def test_starts_files_are_read_from_every_process_a_cut_line_left_out(tmp_path):
    (tmp_path / "starts-1.txt").write_text("0 1.0 1.5\n1 2.0\n")
    (tmp_path / "starts-2.txt").write_text("2 3.0 3.25\n")
    assert sorted(lags.read(tmp_path)) == [(0, 1.0, 1.5), (2, 3.0, 3.25)]


def test_cpu_a_job_by_kind_with_the_workers_and_the_total():
    cpu = {"postgres": 2.0, "redis": 0.5, "dispatcher": 1.0, "worker": 0.4, "worker pool": 0.6}
    assert report.cpu_ms_per_job(cpu, 1000) == {
        "postgres": 2.0,
        "redis": 0.5,
        "dispatcher": 1.0,
        "worker": 0.4,
        "worker pool": 0.6,
        "workers": 1.0,
        "total": 4.5,
    }
    assert report.cpu_ms_per_job(cpu, 0) == {}


def test_idle_cost_is_cpu_ms_a_second():
    assert report.cpu_ms_per_second({"postgres": 0.2, "worker": 0.1}, 20) == {
        "postgres": 10.0,
        "worker": 5.0,
        "total": 15.0,
    }


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ("dispatcher-1", "dispatcher"),
        ("worker-2", "worker"),
        ("worker-2 pool", "worker pool"),
        ("timer-1", "timer"),
    ],
)
def test_a_process_counts_as_its_kind(part, expected):
    assert kind(part) == expected


def test_the_costliest_backends_first():
    backends = [("walwriter", "", 0.1), ("client backend", "UPDATE", 0.9), ("x", "", 0.0)]
    assert report.backend_rows(backends, 1000, top=2) == [
        {"process": "client backend", "last query": "UPDATE", "CPU ms/job": 0.9},
        {"process": "walwriter", "last query": "", "CPU ms/job": 0.1},
    ]
