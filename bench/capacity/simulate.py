"""A discrete-event model of Tempo's path of a job, parameterised by bench/capacity.

    python -m bench.capacity.simulate [--validate] [--extrapolate]

Dispatchers claim the due jobs of their partitions in one statement per claim (at most
`(MAX_QUEUED_MESSAGES − backlog) × MAX_BATCH` rows), split them into messages as the
engine does (`ceil(k / FANOUT)` jobs, at most `MAX_BATCH`) and publish them; worker slots
take one message at a time, start its jobs in one statement, run the handlers and finish
them in one statement (a transactional job: one transaction per job). PostgreSQL is a
queue with N cores whose service times are the measured ones (a fixed part per statement
and a part per row). Every CPU a process needs is a `simpy.Resource`: in `--validate`
everything shares the two cores of the development machine, as in the measured bursts;
in `--extrapolate` PostgreSQL has its own cores and every dispatcher and worker process
its own core.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import simpy

RESULTS = Path(__file__).resolve().parents[1] / "results" / "capacity.json"


@dataclass(frozen=True)
class Costs:
    """Milliseconds; `*_row` per job in the statement or message, the rest per call."""

    claim_fixed: float = 0.3
    claim_row: float = 0.02
    start_fixed: float = 0.2
    start_row: float = 0.12
    finish_fixed: float = 0.2
    finish_row: float = 0.03
    tx_finish: float = 0.35  # a transactional job's own transaction (PG side)
    dispatcher_claim: float = 1.5  # dispatcher CPU per claim (wake-up, rows, bookkeeping)
    dispatcher_row: float = 0.025  # dispatcher CPU per job (message body, publish)
    worker_message: float = 3.0  # worker CPU per message (Celery, start, finish calls)
    worker_row: float = 0.07  # worker CPU per job in a message
    tx_worker_row: float = 0.4  # worker CPU per transactional job (its own transaction)
    round_trip: float = 0.1  # client ↔ PostgreSQL and client ↔ broker


def measured_costs(path: Path = RESULTS) -> Costs:
    """The model's costs from the last bench/capacity run: per-row parts from its bursts
    (thousands of rows per claim, tens per start), fixed parts from its evenly spread
    run (one job per statement). pg_stat_statements' execution times are scaled so that
    they add up to the server's measured CPU per job (parsing, commits, WAL writing)."""
    data = json.loads(path.read_text())
    burst = next(r for r in data["bursts"] if r["delivery"] == "at_least_once")
    tx = next(r for r in data["bursts"] if r["delivery"] == "transactional")
    steady = next(r for r in data["steady"] if r["delivery"] == "at_least_once")

    def scaled(phase: dict) -> dict[str, tuple[float, float]]:
        scale = max(1.0, phase["pg_cpu_ms_per_job"] / phase["exec_ms_per_job"])
        return {
            top["statement"][:40]: (top["mean_ms"] * scale, top["rows_per_call"])
            for top in phase["top"]
        }

    def per_row(phase: dict, prefix: str) -> float:
        mean, rows = next(v for k, v in scaled(phase).items() if k.startswith(prefix))
        return mean / max(rows, 1.0)

    claim, start, finish = CLAIM_PREFIX, START_PREFIX, FINISH_PREFIX
    one = scaled(steady["steady"])

    def fixed(prefix: str) -> float:
        return next(mean for k, (mean, _) in one.items() if k.startswith(prefix))

    return Costs(
        claim_fixed=fixed(claim),
        claim_row=per_row(burst["claim"], claim),
        start_fixed=fixed(start),
        start_row=per_row(burst["run"], start),
        finish_fixed=fixed(finish),
        finish_row=per_row(burst["run"], finish),
        tx_finish=per_row(tx["run"], finish),
        dispatcher_claim=steady["dispatcher_cpu_ms_per_job"],
        dispatcher_row=burst["dispatcher_cpu_ms_per_job"],
        worker_message=steady["worker_cpu_ms_per_job"],
        worker_row=burst["worker_cpu_ms_per_job"],
        tx_worker_row=tx["worker_cpu_ms_per_job"],
    )


CLAIM_PREFIX = "UPDATE tasksapp_job j SET state = $1, l"
START_PREFIX = "UPDATE tasksapp_job j SET state = $6, a"
FINISH_PREFIX = "UPDATE tasksapp_job j SET state = $5, f"


@dataclass(frozen=True)
class Setup:
    dispatchers: int
    workers: int  # worker processes
    slots: int  # pool slots each (prefork children)
    pg_cores: int
    shared_cores: int | None = None  # everything on one host of this many cores
    transactional: bool = False
    max_batch: int = 250
    fanout: int = 32
    max_queued_messages: int = 64


class Model:
    def __init__(self, setup: Setup, costs: Costs) -> None:
        self.setup, self.costs = setup, costs
        self.env = simpy.Environment()
        if setup.shared_cores:
            self.pg = simpy.Resource(self.env, setup.shared_cores)
            self.dispatcher_cpu = [self.pg] * setup.dispatchers
            self.worker_cpu = [self.pg] * setup.workers
        else:
            self.pg = simpy.Resource(self.env, setup.pg_cores)
            self.dispatcher_cpu = [simpy.Resource(self.env, 1) for _ in range(setup.dispatchers)]
            self.worker_cpu = [simpy.Resource(self.env, 1) for _ in range(setup.workers)]
        self.queue = simpy.Store(self.env)
        self.started = 0
        self.last_start = 0.0

    def busy(self, resource: simpy.Resource, ms: float):
        with resource.request() as request:
            yield request
            yield self.env.timeout(ms)

    def statement(self, fixed: float, row: float, rows: int):
        yield self.env.timeout(self.costs.round_trip)
        yield from self.busy(self.pg, fixed + row * rows)

    def dispatcher(self, index: int, due: int):
        setup, costs = self.setup, self.costs
        cpu = self.dispatcher_cpu[index]
        while due:
            room = (setup.max_queued_messages - len(self.queue.items)) * setup.max_batch
            if room <= 0:
                yield self.env.timeout(1.0)  # the loop's next look at the backlog
                continue
            rows = min(due, room)
            due -= rows
            yield from self.statement(costs.claim_fixed, costs.claim_row, rows)
            yield from self.busy(cpu, costs.dispatcher_claim + costs.dispatcher_row * rows)
            size = max(1, min(setup.max_batch, math.ceil(rows / setup.fanout)))
            for first in range(0, rows, size):
                self.queue.put(min(size, rows - first))
            yield self.env.timeout(costs.round_trip)  # the publish

    def slot(self, worker: int):
        costs = self.costs
        cpu = self.worker_cpu[worker]
        while True:
            jobs = yield self.queue.get()
            yield self.env.timeout(costs.round_trip)  # the broker hop
            yield from self.busy(cpu, costs.worker_message / 2)
            yield from self.statement(costs.start_fixed, costs.start_row, jobs)
            self.started += jobs
            self.last_start = self.env.now
            if self.setup.transactional:
                for _ in range(jobs):
                    yield from self.busy(cpu, costs.tx_worker_row)
                    yield from self.statement(costs.tx_finish, 0.0, 1)
                    yield self.env.timeout(2 * costs.round_trip)  # BEGIN, COMMIT
            else:
                yield from self.busy(cpu, costs.worker_row * jobs)
                yield from self.statement(costs.finish_fixed, costs.finish_row, jobs)
            yield from self.busy(cpu, costs.worker_message / 2)

    def burst(self, jobs: int) -> float:
        """Seconds from the run time to the last start of `jobs` due at one instant."""
        share, extra = divmod(jobs, self.setup.dispatchers)
        for index in range(self.setup.dispatchers):
            self.env.process(self.dispatcher(index, share + (index < extra)))
        for worker in range(self.setup.workers):
            for _ in range(self.setup.slots):
                self.env.process(self.slot(worker))
        while self.started < jobs:
            self.env.step()
        return self.last_start / 1000


def burst_rate(setup: Setup, costs: Costs, jobs: int) -> tuple[float, float]:
    seconds = Model(setup, costs).burst(jobs)
    return seconds, jobs / seconds


def steady_capacity(setup: Setup, costs: Costs) -> dict[str, float]:
    """Jobs/s each resource could carry when jobs come one per claim (spread evenly)."""
    one = costs
    pg_ms = (
        one.claim_fixed
        + one.claim_row
        + one.start_fixed
        + one.start_row
        + (one.tx_finish if setup.transactional else one.finish_fixed + one.finish_row)
    )
    dispatcher_ms = one.dispatcher_claim + one.dispatcher_row
    worker_ms = one.worker_message + (one.tx_worker_row if setup.transactional else one.worker_row)
    return {
        "postgres": setup.pg_cores * 1000 / pg_ms,
        "dispatchers": setup.dispatchers * 1000 / dispatcher_ms,
        "workers": setup.workers * 1000 / worker_ms,
    }


MEASURED = [  # docs/BENCHMARKS.md, bench/burst: 2 dispatchers, 2 prefork workers × 2
    ("at-least-once 10,000 (2026-11-22, quiet)", 10_000, False, 11_911),
    ("at-least-once 100,000 (2026-11-22, quiet)", 100_000, False, 11_215),
    ("at-least-once 10,000 (2026-11-24, busy)", 10_000, False, 9_396),
    ("at-least-once 10,000 (2026-11-23, busy, median of 4)", 10_000, False, 6_305),
    ("at-least-once 100,000 (2026-11-23, busy, median of 4)", 100_000, False, 5_298),
    ("transactional 10,000 (2026-11-22, quiet)", 10_000, True, 2_854),
    ("transactional 10,000 (2026-11-24, busy)", 10_000, True, 2_201),
]


def validate(costs: Costs) -> None:
    print("| measured burst | jobs/s measured | jobs/s simulated | simulated / measured |")
    print("|---|--:|--:|--:|")
    for name, jobs, transactional, measured in MEASURED:
        setup = Setup(dispatchers=2, workers=2, slots=2, pg_cores=2, shared_cores=2)
        _, rate = burst_rate(replace(setup, transactional=transactional), costs, jobs)
        print(f"| {name} | {measured:,} | {rate:,.0f} | {rate / measured:.2f} |")


def extrapolate(costs: Costs) -> None:
    print("| dispatchers | workers × slots | PG cores | delivery | burst | seconds | jobs/s |")
    print("|--:|--:|--:|---|--:|--:|--:|")
    for dispatchers, workers, pg_cores in [
        (2, 2, 2),
        (16, 100, 8),
        (100, 1000, 16),
        (100, 1000, 64),
    ]:
        for transactional in (False, True):
            for jobs in (100_000, 1_000_000):
                setup = Setup(
                    dispatchers=dispatchers,
                    workers=workers,
                    slots=2,
                    pg_cores=pg_cores,
                    transactional=transactional,
                )
                seconds, rate = burst_rate(setup, costs, jobs)
                print(
                    f"| {dispatchers} | {workers} × 2 | {pg_cores}"
                    f" | {'transactional' if transactional else 'at-least-once'}"
                    f" | {jobs:,} | {seconds:.1f} | {rate:,.0f} |"
                )
    print("\nSpread evenly (one job per claim): jobs/s each part could carry\n")
    print("| dispatchers | workers | PG cores | delivery | PostgreSQL | dispatchers | workers |")
    print("|--:|--:|--:|---|--:|--:|--:|")
    for dispatchers, workers, pg_cores in [
        (2, 2, 2),
        (16, 100, 8),
        (100, 1000, 16),
        (100, 1000, 64),
    ]:
        for transactional in (False, True):
            setup = Setup(dispatchers, workers, 2, pg_cores, transactional=transactional)
            cap = steady_capacity(setup, costs)
            print(
                f"| {dispatchers} | {workers} | {pg_cores}"
                f" | {'transactional' if transactional else 'at-least-once'}"
                f" | {cap['postgres']:,.0f} | {cap['dispatchers']:,.0f} | {cap['workers']:,.0f} |"
            )


PEAK_OVER_MEAN = 1.12  # golden phases, busiest second of a daily task (bench/planning)
HEADROOM = 0.5  # size every part to run at most half busy at the peak
RETENTION_DAYS = 7  # finished rows kept (pruning them is the operator's job: docs/SCALING.md)


def sizing(path: Path = RESULTS) -> None:
    """The sizing table for a daily task over 1M, 10M and 100M members, from the measured
    per-job costs of jobs spread evenly (one job per claim) and the planner's insert."""
    data = json.loads(path.read_text())
    insert = next(r for r in data["bursts"] if r["delivery"] == "at_least_once")["insert"]
    size = next(r for r in data["bursts"] if r["delivery"] == "at_least_once")
    row_bytes = sum(size["table_bytes_per_job"].values())
    print(
        "| members | delivery | jobs/day | peak jobs/s | PG cores | dispatchers"
        " | worker processes (engine) | WAL/day | jobs table, 7 days kept |"
    )
    print("|--:|---|--:|--:|--:|--:|--:|--:|--:|")
    for members in (1_000_000, 10_000_000, 100_000_000):
        for steady in data["steady"]:
            peak = members / 86_400 * PEAK_OVER_MEAN
            pg_ms = steady["steady"]["pg_cpu_ms_per_job"] + insert["pg_cpu_ms_per_job"]
            wal = steady["steady"]["wal_bytes_per_job"] + insert["wal_bytes_per_job"]
            cores = max(2, math.ceil(peak * pg_ms / 1000 / HEADROOM))
            dispatchers = max(
                2, math.ceil(peak * steady["dispatcher_cpu_ms_per_job"] / 1000 / HEADROOM)
            )
            workers = max(2, math.ceil(peak * steady["worker_cpu_ms_per_job"] / 1000 / HEADROOM))
            table = members * (RETENTION_DAYS + 1) * row_bytes
            print(
                f"| {members:,} | {steady['delivery']} | {members:,} | {peak:,.0f} | {cores}"
                f" | {dispatchers} | {workers} | {members * wal / 2**30:,.1f} GiB"
                f" | {table / 2**30:,.0f} GiB |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--extrapolate", action="store_true")
    parser.add_argument("--sizing", action="store_true")
    args = parser.parse_args()
    if args.sizing:
        sizing()
        return
    costs = measured_costs() if RESULTS.exists() else Costs()
    print(f"costs (ms): {costs}\n")
    if args.validate or not args.extrapolate:
        validate(costs)
        print()
    if args.extrapolate or not args.validate:
        extrapolate(costs)


if __name__ == "__main__":
    main()
