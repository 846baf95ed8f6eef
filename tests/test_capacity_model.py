"""The capacity bench's instruments and model (bench/capacity): the CPU it reads from /proc
is the CPU the processes burned, and the simulation neither loses nor invents jobs and
is bounded by the work it is given."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace

import psycopg
import pytest

from bench.capacity import measure
from bench.capacity.measure import StatementsPostgres, tree_cpu_seconds
from bench.capacity.simulate import Costs, Model, Setup, burst_rate, steady_capacity

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


def test_tree_cpu_counts_live_and_reaped_children():
    """A parent that waited for a child burning 0.4 s, then a live child that burnt 0.4 s."""
    burn_then_wait = BURN.format(seconds=0.4) + "print('burnt', flush=True)\ntime.sleep(60)\n"
    script = textwrap.dedent(f"""
        import subprocess, sys
        subprocess.run([sys.executable, "-c", {BURN.format(seconds=0.4)!r}])
        child = subprocess.Popen([sys.executable, "-c", {burn_then_wait!r}],
                                 stdout=subprocess.PIPE, text=True)
        print(child.stdout.readline().strip(), flush=True)
        child.wait()
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "burnt"
        cpu = tree_cpu_seconds(parent.pid)
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)])  # the sleeping child
        parent.wait()
    assert 0.75 <= cpu <= 3.0


@pytest.mark.parametrize("transactional", [False, True])
def test_every_job_of_a_burst_starts_once(transactional):
    setup = Setup(dispatchers=3, workers=4, slots=2, pg_cores=2, transactional=transactional)
    model = Model(setup, Costs())
    model.burst(7_001)
    assert len(model.lags) == 7_001
    assert min(model.lags) > 0
    assert not model.queue.items  # nothing left behind in the broker
    assert not any(model.due)  # nor in a dispatcher


def test_a_steady_stream_starts_every_job_after_it_is_due_and_soon():
    costs = Costs()
    model = Model(Setup(dispatchers=2, workers=2, slots=4, pg_cores=2), costs)
    result = model.stream(rate=100, seconds=10)
    assert len(model.lags) == result["jobs"] == 1_000
    assert min(model.lags) >= 3 * costs.round_trip  # claim, broker hop, start
    assert result["p99_ms"] < 40  # within the dispatch lead: started on time
    assert 0 < result["postgres"] < 0.5


def test_a_burst_takes_at_least_the_database_work_spread_over_its_cores():
    costs = Costs()
    jobs = 20_000
    setup = Setup(dispatchers=8, workers=50, slots=2, pg_cores=2)
    seconds, _ = burst_rate(setup, costs, jobs)
    per_row = costs.claim_row + costs.start_row  # every claim and start precedes the last start
    assert seconds >= jobs * per_row / 2 / 1000


def test_more_database_cores_drain_a_database_bound_burst_faster():
    slow_database = replace(Costs(), start_row=1.0)
    setup = Setup(dispatchers=8, workers=50, slots=2, pg_cores=2)
    two, _ = burst_rate(setup, slow_database, 20_000)
    eight, _ = burst_rate(replace(setup, pg_cores=8), slow_database, 20_000)
    assert eight < two / 2


def test_steady_capacity_scales_with_each_part():
    setup = Setup(dispatchers=2, workers=10, slots=2, pg_cores=4)
    base = steady_capacity(setup, Costs())
    doubled = steady_capacity(replace(setup, pg_cores=8, workers=20), Costs())
    assert doubled["postgres"] == pytest.approx(2 * base["postgres"])
    assert doubled["workers"] == pytest.approx(2 * base["workers"])
    assert doubled["dispatchers"] == pytest.approx(base["dispatchers"])


@pytest.fixture(scope="module")
def statements_server():
    server = StatementsPostgres().start()
    try:
        yield server
    finally:
        server.stop()


def test_the_bench_server_counts_statements_wal_and_cpu_of_one_insert(statements_server):
    with psycopg.connect(statements_server.url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("CREATE TABLE tasksapp_job (id bigserial PRIMARY KEY, note text)")
        postmaster = statements_server.postmaster_pid()
        measure.reset_statements(conn)
        before = measure.snapshot(conn, postmaster)
        conn.execute(
            "INSERT INTO tasksapp_job (note) SELECT md5(i::text) FROM generate_series(1, 20000) i"
        )
        after = measure.snapshot(conn, postmaster)
        (insert,) = [s for s in measure.statements(conn) if s.query.startswith("INSERT")]
        assert (insert.calls, insert.rows) == (1, 20_000)
        assert insert.on_jobs_table
        assert measure.wal_bytes(conn, before, after) > 20_000 * 40  # a row is more than 40 B
        assert after.server_cpu_s > before.server_cpu_s
        tuples = measure.job_table_tuples(conn)
        assert tuples["inserted"] == 20_000
