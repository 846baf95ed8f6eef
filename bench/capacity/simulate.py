"""A discrete-event model of Tempo's path of a job, parameterised by bench/capacity.

    python -m bench.capacity.simulate [--validate] [--extrapolate] [--sizing]
                                      [--round-trip-ms 0.5]

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
    """Milliseconds; `*_row` per job in the statement or message, the rest per call. The
    defaults are round figures of the measured order for the model's tests; the bench
    uses the ones fitted to its measurements (`measured_costs`)."""

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
    """The model's costs from the last bench/capacity run. Each cost is a line through two
    measured points, the burst (thousands of rows per claim, 250 per message) and the
    evenly spread run (a few rows per statement, about one job per message): a fixed
    part per call and a part per row. PostgreSQL's part is its measured CPU, shared among
    the statements of a phase by their execution times (pg_stat_statements), so waiting
    for a CPU on a busy machine is not counted as work."""
    data = json.loads(path.read_text())
    burst = next(r for r in data["bursts"] if r["delivery"] == "at_least_once")
    tx = next(r for r in data["bursts"] if r["delivery"] == "transactional")
    steady = next(r for r in data["steady"] if r["delivery"] == "at_least_once")

    def cpu_and_rows(phase: dict, prefix: str) -> tuple[float, float]:
        scale = phase["pg_cpu_ms_per_job"] / phase["exec_ms_per_job"]
        top = next(t for t in phase["top"] if t["statement"].startswith(prefix))
        return top["mean_ms"] * scale, max(1.0, top["rows_per_call"])

    def line(big: tuple[float, float], small: tuple[float, float]) -> tuple[float, float]:
        """(fixed, per row) through (cost, rows) of a big and a small call."""
        (cost_big, rows_big), (cost_small, rows_small) = big, small
        per_row = max(0.0, (cost_big - cost_small) / (rows_big - rows_small))
        return max(0.01, cost_small - rows_small * per_row), per_row

    def statement(phase: str, prefix: str) -> tuple[float, float]:
        return line(cpu_and_rows(burst[phase], prefix), cpu_and_rows(steady["steady"], prefix))

    claim = statement("claim", CLAIM_PREFIX)
    start = statement("run", START_PREFIX)
    finish = statement("run", FINISH_PREFIX)
    claimed = cpu_and_rows(burst["claim"], CLAIM_PREFIX)[1]
    claimed_steady = cpu_and_rows(steady["steady"], CLAIM_PREFIX)[1]
    per_message = cpu_and_rows(burst["run"], START_PREFIX)[1]
    per_message_steady = cpu_and_rows(steady["steady"], START_PREFIX)[1]
    dispatcher = line(
        (burst["dispatcher_cpu_ms_per_job"] * claimed, claimed),
        (steady["dispatcher_cpu_ms_per_job"] * claimed_steady, claimed_steady),
    )
    worker = line(
        (burst["worker_cpu_ms_per_job"] * per_message, per_message),
        (steady["worker_cpu_ms_per_job"] * per_message_steady, per_message_steady),
    )
    return Costs(
        claim_fixed=claim[0],
        claim_row=claim[1],
        start_fixed=start[0],
        start_row=start[1],
        finish_fixed=finish[0],
        finish_row=finish[1],
        tx_finish=max(0.01, tx["run"]["pg_cpu_ms_per_job"] - start[1]),
        dispatcher_claim=dispatcher[0],
        dispatcher_row=dispatcher[1],
        worker_message=worker[0],
        worker_row=worker[1],
        tx_worker_row=max(0.01, tx["worker_cpu_ms_per_job"] - worker[1]),
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
        self.queue = simpy.Store(self.env)  # messages: lists of the jobs' due times
        self.due: list[list[float]] = [[] for _ in range(setup.dispatchers)]
        self.wake = [self.env.event() for _ in range(setup.dispatchers)]
        self.lags: list[float] = []  # started − due, ms, per job
        self.last_start = 0.0
        self.busy_ms = {"postgres": 0.0, "dispatchers": 0.0, "workers": 0.0}

    def busy(self, resource: simpy.Resource, ms: float, part: str):
        self.busy_ms[part] += ms
        with resource.request() as request:
            yield request
            yield self.env.timeout(ms)

    def statement(self, fixed: float, row: float, rows: int):
        yield self.env.timeout(self.costs.round_trip)
        yield from self.busy(self.pg, fixed + row * rows, "postgres")

    def make_due(self, index: int, due_ms: float) -> None:
        self.due[index].append(due_ms)
        if not self.wake[index].triggered:
            self.wake[index].succeed()

    def dispatcher(self, index: int):
        setup, costs = self.setup, self.costs
        cpu = self.dispatcher_cpu[index]
        while True:
            if not self.due[index]:
                self.wake[index] = self.env.event()
                yield self.wake[index]
            room = (setup.max_queued_messages - len(self.queue.items)) * setup.max_batch
            if room <= 0:
                yield self.env.timeout(10.0)  # BACKPRESSURE_RETRY_MS: look again
                continue
            claimed = self.due[index][:room]
            del self.due[index][:room]
            rows = len(claimed)
            yield from self.statement(costs.claim_fixed, costs.claim_row, rows)
            yield from self.busy(
                cpu, costs.dispatcher_claim + costs.dispatcher_row * rows, "dispatchers"
            )
            size = max(1, min(setup.max_batch, math.ceil(rows / setup.fanout)))
            for first in range(0, rows, size):
                self.queue.put(claimed[first : first + size])
            yield self.env.timeout(costs.round_trip)  # the publish

    def slot(self, worker: int):
        costs = self.costs
        cpu = self.worker_cpu[worker]
        while True:
            message = yield self.queue.get()
            jobs = len(message)
            yield self.env.timeout(costs.round_trip)  # the broker hop
            yield from self.busy(cpu, costs.worker_message / 2, "workers")
            yield from self.statement(costs.start_fixed, costs.start_row, jobs)
            self.lags += [self.env.now - due for due in message]
            self.last_start = self.env.now
            if self.setup.transactional:
                for _ in range(jobs):
                    yield from self.busy(cpu, costs.tx_worker_row, "workers")
                    yield from self.statement(costs.tx_finish, 0.0, 1)
                    yield self.env.timeout(2 * costs.round_trip)  # BEGIN, COMMIT
            else:
                yield from self.busy(cpu, costs.worker_row * jobs, "workers")
                yield from self.statement(costs.finish_fixed, costs.finish_row, jobs)
            yield from self.busy(cpu, costs.worker_message / 2, "workers")

    def _start_processes(self) -> None:
        for index in range(self.setup.dispatchers):
            self.env.process(self.dispatcher(index))
        for worker in range(self.setup.workers):
            for _ in range(self.setup.slots):
                self.env.process(self.slot(worker))

    def burst(self, jobs: int) -> float:
        """Seconds from the run time to the last start of `jobs` due at one instant."""
        for job in range(jobs):
            self.due[job % self.setup.dispatchers].append(0.0)
        self._start_processes()
        while len(self.lags) < jobs:
            self.env.step()
        return self.last_start / 1000

    def stream(self, rate: float, seconds: float) -> dict[str, float]:
        """Jobs due evenly at `rate` per second for `seconds`: how long from due to
        started (the dispatch lead hides up to 40 ms of it) and how busy PostgreSQL is."""
        jobs = int(rate * seconds)

        def feed():
            for job in range(jobs):
                due = job * 1000 / rate
                yield self.env.timeout(max(0.0, due - self.env.now))
                self.make_due(job % self.setup.dispatchers, due)

        self._start_processes()
        self.env.process(feed())
        while len(self.lags) < jobs:
            self.env.step()
        lags = sorted(self.lags)
        return {
            "jobs": jobs,
            "p50_ms": lags[len(lags) // 2],
            "p99_ms": lags[int(len(lags) * 0.99)],
            "max_ms": lags[-1],
            **self.busy_shares(),
        }

    def busy_shares(self) -> dict[str, float]:
        """How busy each part was on average: 1.0 is every core of it all the time."""
        setup, elapsed = self.setup, self.env.now
        cores = {"postgres": setup.pg_cores, "dispatchers": setup.dispatchers}
        cores["workers"] = setup.workers
        return {part: ms / elapsed / cores[part] for part, ms in self.busy_ms.items()}


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
    ("at-least-once 10,000 (2026-11-23, busy, median of 4)", 10_000, False, 5_539),
    ("at-least-once 100,000 (2026-11-23, busy, median of 4)", 100_000, False, 4_757),
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
    print("\nSpread evenly: every job alone (a bound), and simulated at a steady rate\n")
    print(
        "| dispatchers | workers | PG cores | delivery | bound: PostgreSQL | bound: dispatchers"
        " | rate simulated | due → started p99 (ms) | PG busy | dispatchers busy |"
    )
    print("|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|")
    for dispatchers, workers, pg_cores, rate in STREAMS:
        for transactional in (False, True):
            setup = Setup(dispatchers, workers, 2, pg_cores, transactional=transactional)
            cap = steady_capacity(setup, costs)
            result = Model(setup, costs).stream(rate, seconds=max(5.0, 50_000 / rate))
            print(
                f"| {dispatchers} | {workers} | {pg_cores}"
                f" | {'transactional' if transactional else 'at-least-once'}"
                f" | {cap['postgres']:,.0f} | {cap['dispatchers']:,.0f} | {rate:,}"
                f" | {result['p99_ms']:.1f} | {result['postgres']:.0%}"
                f" | {result['dispatchers']:.0%} |"
            )


STREAMS = [(2, 2, 2, 200), (16, 100, 8, 2_000), (100, 1000, 16, 10_000), (100, 1000, 64, 30_000)]
PEAK_OVER_MEAN = 1.12  # golden phases, busiest second of a daily task (bench/planning)
HEADROOM = 0.5  # size every part to run at most half busy at the peak
RETENTION_DAYS = 7  # finished rows kept (pruning them is the operator's job: docs/SCALING.md)


def sized(rate: float, costs: Costs, transactional: bool) -> tuple[Setup, dict]:
    """The smallest set-up (at least two of everything, for failover) that carries `rate`
    jobs/s spread evenly with every part at most HEADROOM busy, found by simulating."""
    setup = Setup(dispatchers=2, workers=2, slots=4, pg_cores=2, transactional=transactional)
    grow = {"postgres": "pg_cores", "dispatchers": "dispatchers", "workers": "workers"}
    while True:
        result = Model(setup, costs).stream(rate, seconds=max(5.0, 20_000 / rate))
        over = {part: result[part] for part in grow if result[part] > HEADROOM}
        if not over:
            return setup, result
        for part, busy in over.items():
            field = grow[part]
            now = getattr(setup, field)
            setup = replace(setup, **{field: max(now + 1, math.ceil(now * busy / HEADROOM))})


def sizing(costs: Costs, path: Path = RESULTS) -> None:
    """A daily task over 1M, 10M and 100M members: the set-up the model needs at the peak
    second, WAL and table size from the measured per-job figures."""
    data = json.loads(path.read_text())
    burst = next(r for r in data["bursts"] if r["delivery"] == "at_least_once")
    steady = next(r for r in data["steady"] if r["delivery"] == "at_least_once")
    wal = burst["insert"]["wal_bytes_per_job"] + steady["steady"]["wal_bytes_per_job"]
    row_bytes = sum(burst["table_bytes_per_job"].values())
    print(
        "| members | delivery | peak jobs/s | PG cores | dispatchers | worker processes"
        " | due → started p99 (ms) | PG busy | WAL/day | jobs table, 7 days kept |"
    )
    print("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for members in (1_000_000, 10_000_000, 100_000_000):
        peak = members / 86_400 * PEAK_OVER_MEAN
        for transactional in (False, True):
            setup, result = sized(peak, costs, transactional)
            table = members * (RETENTION_DAYS + 1) * row_bytes
            print(
                f"| {members:,} | {'transactional' if transactional else 'at-least-once'}"
                f" | {peak:,.0f} | {setup.pg_cores} | {setup.dispatchers}"
                f" | {setup.workers} × {setup.slots} | {result['p99_ms']:.1f}"
                f" | {result['postgres']:.0%} | {members * wal / 2**30:,.0f} GiB"
                f" | {table / 2**30:,.0f} GiB |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--extrapolate", action="store_true")
    parser.add_argument("--sizing", action="store_true")
    parser.add_argument(
        "--round-trip-ms", type=float, default=0.5, help="between hosts, for --extrapolate"
    )
    args = parser.parse_args()
    if args.sizing:
        sizing(replace(measured_costs(), round_trip=args.round_trip_ms))
        return
    costs = measured_costs()
    print(f"costs (ms), loopback: {costs}\n")
    if args.validate or not args.extrapolate:
        validate(costs)
        print()
    if args.extrapolate or not args.validate:
        print(f"between hosts: {args.round_trip_ms} ms round trips\n")
        extrapolate(replace(costs, round_trip=args.round_trip_ms))


if __name__ == "__main__":
    main()
