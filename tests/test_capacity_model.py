"""The capacity bench's instruments and model (bench/capacity): the CPU it reads from /proc
is the CPU the processes burned; the simulation neither loses nor invents jobs, starts
none before its time, claims and packs a steady stream in rounds as the engine does, is
bounded by the work it is given, and its fitted costs give back the runs they came from."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import fields, replace

import psycopg
import pytest

from bench.capacity import measure
from bench.capacity.measure import StatementsPostgres, tree_cpu_seconds
from bench.capacity.simulate import (
    CLAIM,
    STEADY_START,
    STEADY_SUCCESS,
    Costs,
    Job,
    Line,
    Model,
    Setup,
    burst_rate,
    cut_into_messages,
    measured_costs,
    steady_run,
    steady_statement,
)

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
    assert sorted(model.started) == list(range(7_001))
    assert min(model.lags) > 0  # a claim, a broker hop and a start came first
    assert not model.queue.items  # nothing left behind in the broker
    assert not any(model.pending)  # nor in a dispatcher


@pytest.mark.parametrize("transactional", [False, True])
def test_every_job_of_a_steady_stream_starts_once_and_none_before_its_time(transactional):
    setup = Setup(dispatchers=2, workers=2, slots=2, pg_cores=2, transactional=transactional)
    model = Model(setup, Costs())
    result = model.stream(rate=1_000, seconds=2)
    assert sorted(model.started) == list(range(2_000))
    assert min(model.lags) >= 0
    assert result["p50_ms"] == 0  # its message came a lead ahead: it starts at its instant
    assert result["p99_ms"] < 5  # or after its worker's CPU is free, not a round late


def test_a_round_is_claimed_in_one_statement():
    model = Model(Setup(dispatchers=1, workers=2, slots=1, pg_cores=2), Costs())
    model.stream(rate=1_000, seconds=2)
    assert sum(model.claims) == 2_000
    assert model.claims[1:-1] == [20] * (len(model.claims) - 2)  # 20 ms of jobs 1 ms apart
    two = Model(Setup(dispatchers=2, workers=2, slots=1, pg_cores=2), Costs())
    two.stream(rate=1_000, seconds=2)
    assert sorted(two.claims)[len(two.claims) // 2] == 10  # each claims its half of a round


def test_a_round_shares_messages_by_the_slowest_handler():
    quick = Model(Setup(dispatchers=1, workers=2, slots=1, pg_cores=2), Costs())
    quick.stream(rate=1_000, seconds=2)
    assert quick.messages[1:-1] == [20] * (len(quick.messages) - 2)  # one slot runs them all
    slow = Setup(dispatchers=1, workers=2, slots=1, pg_cores=2, slowest_handler_ms=1.0)
    model = Model(slow, Costs())
    model.stream(rate=1_000, seconds=2)
    assert model.messages[2:-2] == [10] * (len(model.messages) - 4)  # two slots in turn


@pytest.mark.parametrize(
    ("jobs", "apart_ms", "slowest_ms"),
    [(20, 1.0, 0.0), (20, 1.0, 1.0), (7, 3.0, 4.0), (33, 1.0, 0.0), (1_000, 0.0, 0.0)],
)
def test_the_model_cuts_messages_as_the_engine_does(jobs, apart_ms, slowest_ms):
    from tasksapp.engine.dispatcher.messages import split_batches
    from tasksapp.engine.store.rows import Claim

    claims = [Claim(job, 1, job * apart_ms) for job in range(jobs)]
    engine = split_batches(claims, fanout=32, max_batch=250, slowest_ms=slowest_ms)
    setup = Setup(dispatchers=1, workers=1, slots=1, pg_cores=1, slowest_handler_ms=slowest_ms)
    ours = cut_into_messages([Job(c.id, c.run_at_ms) for c in claims], setup)
    assert [[job.id for job in message] for message in ours] == [
        [row[0] for row in message] for message in engine
    ]


def test_a_transactional_group_is_its_message_while_its_jobs_are_close():
    setup = Setup(dispatchers=1, workers=2, slots=1, pg_cores=2, transactional=True)
    close = Model(setup, Costs())
    close.stream(rate=1_000, seconds=2)  # 1 ms apart
    assert sorted(close.groups) == sorted(close.messages)
    apart = Model(setup, Costs())
    apart.stream(rate=100, seconds=2)  # a message of the round's two jobs, 10 ms apart
    assert max(apart.messages) == 2 and set(apart.groups) == {1}
    burst = Model(replace(setup, group_ms=0.0), Costs())
    burst.burst(1_000)
    assert set(burst.groups) == {1}  # a transaction a job, as before the groups


def test_a_burst_takes_at_least_the_database_work_spread_over_its_cores():
    costs = Costs()
    jobs = 20_000
    setup = Setup(dispatchers=8, workers=50, slots=2, pg_cores=2)
    seconds, _ = burst_rate(setup, costs, jobs)
    per_row = costs.claim.per_row + costs.start.per_row  # claims and starts precede the last
    assert seconds >= jobs * per_row / 2 / 1000


def test_more_database_cores_drain_a_database_bound_burst_faster():
    slow_database = replace(Costs(), start=Line(0.2, 1.0))
    setup = Setup(dispatchers=8, workers=50, slots=2, pg_cores=2)
    two, _ = burst_rate(setup, slow_database, 20_000)
    eight, _ = burst_rate(replace(setup, pg_cores=8), slow_database, 20_000)
    assert eight < two / 2


def test_fewer_jobs_a_round_cost_more_a_job():
    setup = Setup(dispatchers=1, workers=2, slots=1, pg_cores=2)
    full = Model(setup, Costs()).stream(rate=1_000, seconds=2)["cpu_ms_per_job"]
    sparse = Model(setup, Costs()).stream(rate=100, seconds=4)["cpu_ms_per_job"]
    assert all(sparse[part] > 3 * full[part] for part in full)


def test_the_fitted_costs_are_positive():
    costs = measured_costs()
    for field in fields(costs):
        line = getattr(costs, field.name)
        if isinstance(line, Line):
            assert line.fixed > 0 and line.per_row >= 0, field.name


def test_the_fit_reproduces_the_steady_run_it_was_fitted_to():
    """At the claims, messages and groups the steady run measured, the fitted costs give
    back its CPU a job: the dispatcher's and the workers' exactly; PostgreSQL's but for its
    other statements (the workers' rows, heartbeats: a few per cent)."""
    costs = measured_costs()
    run = steady_run("at_least_once")
    claim, start = steady_statement(run, CLAIM), steady_statement(run, STEADY_START)
    success = steady_statement(run, STEADY_SUCCESS)
    measured = run["cpu_ms_per_job"]
    postgres = sum(
        call.per_job * line.at(call.rows)
        for line, call in [(costs.claim, claim), (costs.start, start), (costs.success, success)]
    )
    assert postgres == pytest.approx(measured["postgres"], rel=0.1)
    assert costs.dispatcher.per_job(claim.rows) == pytest.approx(measured["dispatcher"])
    assert costs.worker.per_job(success.rows) == pytest.approx(measured["workers"])
    run_tx = steady_run("transactional")
    group = steady_statement(run_tx, STEADY_SUCCESS)
    assert costs.group.at(group.rows) == pytest.approx(group.cpu_ms)
    message = steady_statement(run_tx, STEADY_START).rows
    workers = costs.worker.per_job(message) + costs.worker_group.per_job(group.rows)
    assert workers == pytest.approx(run_tx["cpu_ms_per_job"]["workers"])


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
