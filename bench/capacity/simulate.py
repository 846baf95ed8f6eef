"""A discrete-event model of Tempo's path of a job, its costs fitted to the benches.

    python -m bench.capacity.simulate [--validate] [--extrapolate] [--sizing]
        [--round-trip-ms 0.5] [--slowest-handler-ms 0] [--steady bench/results/steady.json]

What it models, as the engine does it:

- **Dispatchers** hold the jobs of their partitions (shared round robin), known ahead as
  the engine's timing wheel knows them. A job is claimed at the start of the claim round
  (CLAIM_ROUND_MS, 20 ms) its claim time falls in (its run time less the lead: 40 ms and
  12 round trips): one statement claims every job of the round, at most
  `(MAX_QUEUED_MESSAGES − backlog) × MAX_BATCH` (backpressure: a full queue is looked at
  again after 10 ms). Jobs due at one instant (a burst) are claimed at once.
- **Messages** are cut as `split_batches` cuts them (dispatcher/messages.py): `ceil(k /
  FANOUT)` jobs, at most MAX_BATCH; when that is one job, jobs spread in time are packed
  into the fewest messages in which one slot runs them in turn, each holding the slot
  for the slowest handler plus JOB_OVERHEAD_MS.
- **Worker slots** take one message at a time: start its jobs in one statement, begin
  each job at its own instant (lag: how long after its instant the job had its worker's
  CPU), and record their successes in one statement. Transactional jobs share a
  transaction (a group, worker/groups.py) while the next job's instant is at most
  GROUP_WAIT_MS away and the group is younger than TRANSACTION_GROUP_MS: a BEGIN, one
  success statement and a COMMIT per group.
- **PostgreSQL** is one queue of N cores: a statement costs a fixed part plus a part per
  row, and waits for a core. Every process's CPU is a resource too: in `--validate` all
  parts share the two cores of the development machine, as in the benches; in
  `--extrapolate` and `--sizing` PostgreSQL has its own cores and each dispatcher and
  worker process a core of its own.

Left out: Redis (a queue without a limit, a publish and a fetch a message), network
bandwidth, lock waits, autovacuum and checkpoints, the inserts and their NOTIFY, the
heartbeats and coordination of idle processes, handler time (no-op jobs).

The costs (`measured_costs`): per kind of call (a claim, a start, a success, a
transactional group; a dispatcher's CPU a claim, a worker's a message and a group), a
line, a fixed part a call and a part a row, through two measured points: the burst of
bench/capacity (capacity.json: a claim of 20,000 rows, messages of 250) and the steady
run of bench/steady at 1,000 jobs/s (steady.json: a claim a round of 20 jobs, about a
dozen jobs a message). `--validate` compares the model with both benches at their own
set-ups.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
from collections import deque
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import NamedTuple

import simpy

RESULTS = Path(__file__).resolve().parents[1] / "results"
CAPACITY = RESULTS / "capacity.json"  # bench/capacity: the bursts
STEADY = RESULTS / "steady.json"  # bench/steady: the spread-evenly runs
FIT_RATE = 1000  # jobs/s of the steady run the costs are fitted to

# The engine's constants the model follows.
CLAIM_ROUND_MS = 20.0  # dispatcher/sources/database.py
DISPATCH_LEAD_MS = 40.0  # TEMPO_DISPATCH_LEAD_MS
LEAD_ROUND_TRIPS = 12  # dispatcher/loop.py: the lead adds these many round trips
BACKPRESSURE_RETRY_MS = 10.0  # dispatcher/sources/base.py
JOB_OVERHEAD_MS = 0.5  # dispatcher/messages.py: a job's hold of a slot besides its handler
GROUP_WAIT_MS = 2.0  # worker/groups.py: a group waits this long at most for its next job
TRANSACTION_GROUP_MS = 50.0  # TEMPO_TUNING_TRANSACTION_GROUP_MS: a group's age at most

# The statements, by the start of their text (pg_stat_statements cuts them; some runs show
# a state as a literal).
CLAIM = (
    "UPDATE tasksapp_job j SET state = $1, lease_token",
    "UPDATE tasksapp_job j SET state = 'claimed', lease_token",
)
BURST_START = "UPDATE tasksapp_job j SET state = $6, a"  # capacity.json: written starts
BURST_SUCCESS = "UPDATE tasksapp_job j SET state = $5, f"
STEADY_START = "WITH registered AS ( UPDATE tasksapp_workerprocess"  # deferred starts
STEADY_SUCCESS = "WITH succeeded AS ( UPDATE tasksapp_job"  # started and ended at once


@dataclass(frozen=True)
class Line:
    """A cost in ms of CPU: `fixed` per call, `per_row` per job the call carries."""

    fixed: float
    per_row: float

    def at(self, rows: float) -> float:
        return self.fixed + self.per_row * rows

    def per_job(self, rows: float) -> float:
        """A job's share of a call of `rows` jobs."""
        return self.at(rows) / rows

    @classmethod
    def through(cls, steady: Call, burst: Call) -> Line:
        """The line through the steady point, sloped to the burst point; where that slope
        would make the fixed part less than 0.01 ms, or the part per row negative, those
        are kept at 0.01 and 0 and the line still passes through the steady point."""
        if steady.cpu_ms <= 0.01:
            return cls(0.01, 0.0)
        slope = (burst.cpu_ms - steady.cpu_ms) / (burst.rows - steady.rows)
        per_row = min(max(0.0, slope), (steady.cpu_ms - 0.01) / steady.rows)
        return cls(steady.cpu_ms - steady.rows * per_row, per_row)

    def __str__(self) -> str:
        return f"{self.fixed:.3f} + {self.per_row:.4f}/row"


class Call(NamedTuple):
    """One kind of call as measured: ms of CPU a call, rows (jobs) a call, calls a job."""

    cpu_ms: float
    rows: float
    per_job: float = 0.0


@dataclass(frozen=True)
class Costs:
    """The model's costs. The defaults are round figures of the measured order for the
    model's tests; the benches' figures come from `measured_costs`."""

    claim: Line = Line(0.6, 0.02)  # PostgreSQL: a claim statement
    start: Line = Line(0.2, 0.04)  # PostgreSQL: a message's start
    success: Line = Line(1.0, 0.035)  # PostgreSQL: a message's successes (at-least-once)
    group: Line = Line(0.3, 0.1)  # PostgreSQL: a transactional group's successes, commit
    dispatcher: Line = Line(2.5, 0.006)  # a dispatcher's CPU a claim
    worker: Line = Line(3.0, 0.04)  # a worker's CPU a message (half before, half after)
    worker_group: Line = Line(0.5, 0.0)  # a worker's CPU a transactional group, besides
    round_trip: float = 0.1  # client ↔ PostgreSQL and client ↔ broker

    def __str__(self) -> str:
        return "\n".join(f"  {f.name}: {getattr(self, f.name)}" for f in fields(self))


# -- the fit ------------------------------------------------------------------------------
def burst_statement(phase: dict, prefix: str | tuple[str, ...]) -> Call:
    """A statement of a capacity.json phase: its share of the phase's PostgreSQL CPU by
    its execution time."""
    scale = phase["pg_cpu_ms_per_job"] / phase["exec_ms_per_job"]
    top = next(t for t in phase["top"] if t["statement"].startswith(prefix))
    return Call(top["mean_ms"] * scale, max(1.0, top["rows_per_call"]))


def steady_statement(run: dict, prefix: str | tuple[str, ...]) -> Call:
    """The statements of a steady.json run that start with `prefix` (one per worker
    process, as pg_stat_statements tells them apart), with their share of the run's
    PostgreSQL CPU by their execution time."""
    every = run["statements"]
    scale = run["cpu_ms_per_job"]["postgres"] / sum(s["calls/job"] * s["mean ms"] for s in every)
    ours = [s for s in every if s["statement"].startswith(prefix)]
    calls = sum(s["calls/job"] for s in ours)
    mean_ms = sum(s["calls/job"] * s["mean ms"] for s in ours) / calls
    rows = sum(s["calls/job"] * s["rows/call"] for s in ours) / calls
    return Call(mean_ms * scale, rows, calls)


def steady_run(delivery: str, path: Path = STEADY, rate: int = FIT_RATE) -> dict:
    runs = json.loads(path.read_text())["runs"]
    return next(
        r for r in runs if r["side"] == "tempo" and r["delivery"] == delivery and r["rate"] == rate
    )


def burst_run(delivery: str, path: Path = CAPACITY) -> dict:
    return next(r for r in json.loads(path.read_text())["bursts"] if r["delivery"] == delivery)


def measured_costs(capacity: Path = CAPACITY, steady: Path = STEADY) -> Costs:
    """The costs from the last bursts (bench/capacity: 20,000 jobs due at once, a claim of
    them all, messages of 250) and the last steady runs (bench/steady at 1,000 jobs/s, one
    dispatcher: a claim a round of 20 jobs, about a dozen jobs a message).

    Each cost is a line through two points (`Line.through`): per statement kind, its CPU
    a call at its rows a call in the steady run and in the burst. PostgreSQL's CPU of a
    run is shared among its statements by their execution times (pg_stat_statements), so
    waiting for a CPU on a busy machine is not counted as work. A dispatcher's and a
    worker's CPU a claim and a message are their CPU a job times the jobs of a claim and
    a message. The starts are the written ones in the burst (its code predates deferred
    starts) and the deferred ones in the steady run. Transactional jobs add a group (its
    BEGIN, success statement and COMMIT; its worker CPU besides an at-least-once job's),
    through the steady run's groups and the burst's transaction a job: there all of
    PostgreSQL's CPU of the run but for the starts, as its statements' execution times
    (of a run on a machine at load 17) share it badly among calls of 1 and of 250 rows."""
    burst, burst_tx = burst_run("at_least_once", capacity), burst_run("transactional", capacity)
    run, run_tx = steady_run("at_least_once", steady), steady_run("transactional", steady)
    claim, burst_claim = steady_statement(run, CLAIM), burst_statement(burst["claim"], CLAIM)
    burst_start = burst_statement(burst["run"], BURST_START)  # a start a message of 250
    success = steady_statement(run, STEADY_SUCCESS)  # a success statement a message
    worker = Line.through(
        Call(run["cpu_ms_per_job"]["workers"] * success.rows, success.rows),
        Call(burst["worker_cpu_ms_per_job"] * burst_start.rows, burst_start.rows),
    )
    group = steady_statement(run_tx, STEADY_SUCCESS)  # a success statement a group
    tx_message = steady_statement(run_tx, STEADY_START).rows  # a start a message
    tx_extra = run_tx["cpu_ms_per_job"]["workers"] - worker.per_job(tx_message)
    burst_tx_extra = burst_tx["worker_cpu_ms_per_job"] - worker.per_job(burst_start.rows)
    burst_tx_pg = burst_tx["run"]["pg_cpu_ms_per_job"]  # its starts and a transaction a job
    return Costs(
        claim=Line.through(claim, burst_claim),
        start=Line.through(steady_statement(run, STEADY_START), burst_start),
        success=Line.through(success, burst_statement(burst["run"], BURST_SUCCESS)),
        group=Line.through(group, Call(burst_tx_pg - burst_start.cpu_ms / burst_start.rows, 1.0)),
        dispatcher=Line.through(
            Call(run["cpu_ms_per_job"]["dispatcher"] * claim.rows, claim.rows),
            Call(burst["dispatcher_cpu_ms_per_job"] * burst_claim.rows, burst_claim.rows),
        ),
        worker=worker,
        worker_group=Line.through(
            Call(tx_extra * group.rows, group.rows), Call(burst_tx_extra, 1.0)
        ),
    )


# -- the model ----------------------------------------------------------------------------
class Job(NamedTuple):
    id: int
    due: float  # ms


@dataclass(frozen=True)
class Setup:
    dispatchers: int
    workers: int  # worker processes
    slots: int  # pool slots each (prefork children, threads)
    pg_cores: int
    shared_cores: int | None = None  # everything on one host of this many cores
    transactional: bool = False
    slowest_handler_ms: float = 0.0  # what the workers report: a no-op handler
    group_ms: float = TRANSACTION_GROUP_MS  # 0: a transaction a job (before the groups)
    max_batch: int = 250
    fanout: int = 32
    max_queued_messages: int = 64


def pack_in_turn(jobs: list[Job], *, hold_ms: float, max_batch: int) -> list[list[Job]]:
    """dispatcher/messages.py's `pack_in_turn`: the fewest messages in which no job waits
    for another, each job holding a slot `hold_ms` from its instant (interval partitioning:
    a job joins the message free earliest)."""
    free_at: list[tuple[float, int]] = []
    messages: list[list[Job]] = []
    for job in jobs:
        while free_at and len(messages[free_at[0][1]]) >= max_batch:
            heapq.heappop(free_at)
        if free_at and free_at[0][0] <= job.due:
            index = heapq.heappop(free_at)[1]
        else:
            index = len(messages)
            messages.append([])
        messages[index].append(job)
        heapq.heappush(free_at, (job.due + hold_ms, index))
    return messages


def cut_into_messages(jobs: list[Job], setup: Setup) -> list[list[Job]]:
    """dispatcher/messages.py's `split_batches` (parallelism 1) of jobs in run-time order."""
    size = max(1, min(setup.max_batch, math.ceil(len(jobs) / setup.fanout)))
    batches = [jobs[first : first + size] for first in range(0, len(jobs), size)]
    if size > 1:
        return batches
    hold_ms = setup.slowest_handler_ms + JOB_OVERHEAD_MS
    in_turn = pack_in_turn(jobs, hold_ms=hold_ms, max_batch=setup.max_batch)
    return in_turn if len(in_turn) < len(batches) else batches


class Model:
    START_MS = 100.0  # a stream's first job is due then: its round is claimed after 0

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
        self.lead_ms = DISPATCH_LEAD_MS + round(LEAD_ROUND_TRIPS * costs.round_trip)
        self.queue = simpy.Store(self.env)  # the broker: messages, lists of jobs
        self.pending: list[deque[Job]] = [deque() for _ in range(setup.dispatchers)]
        self.started: list[int] = []  # job ids, as they started
        self.lags: list[float] = []  # started − due, ms
        self.last_start = 0.0
        self.claims: list[int] = []  # jobs a claim
        self.messages: list[int] = []  # jobs a message
        self.groups: list[int] = []  # jobs a transactional group
        self.busy_ms = {"postgres": 0.0, "dispatchers": 0.0, "workers": 0.0}

    # -- the parts --------------------------------------------------------------------
    def busy(self, resource: simpy.Resource, ms: float, part: str):
        self.busy_ms[part] += ms
        with resource.request() as request:
            yield request
            yield self.env.timeout(ms)

    def statement(self, cost: Line, rows: int):
        yield self.env.timeout(self.costs.round_trip)
        yield from self.busy(self.pg, cost.at(rows), "postgres")

    def claim_time(self, due: float) -> float:
        """Its run time less the lead, at the start of its claim round."""
        at = due - self.lead_ms
        return at - at % CLAIM_ROUND_MS

    def take_claimable(self, pending: deque[Job], room: int) -> list[Job]:
        """The jobs whose claim time has come, `room` at most (by run time)."""
        next_round = (self.env.now // CLAIM_ROUND_MS + 1) * CLAIM_ROUND_MS
        due_before = next_round + self.lead_ms  # the claim time of any job due before is past
        claimed: list[Job] = []
        while pending and len(claimed) < room and pending[0].due < due_before:
            claimed.append(pending.popleft())
        return claimed

    def dispatcher(self, index: int):
        setup, costs, pending = self.setup, self.costs, self.pending[index]
        while pending:
            wait = self.claim_time(pending[0].due) - self.env.now
            if wait > 0:
                yield self.env.timeout(wait)
            room = (setup.max_queued_messages - len(self.queue.items)) * setup.max_batch
            if room <= 0:
                yield self.env.timeout(BACKPRESSURE_RETRY_MS)
                continue
            claimed = self.take_claimable(pending, room)
            self.claims.append(len(claimed))
            yield from self.statement(costs.claim, len(claimed))
            cpu = self.dispatcher_cpu[index]
            yield from self.busy(cpu, costs.dispatcher.at(len(claimed)), "dispatchers")
            for message in cut_into_messages(claimed, setup):
                self.queue.put(message)
            yield self.env.timeout(costs.round_trip)  # the publish

    def slot(self, worker: int):
        costs, cpu = self.costs, self.worker_cpu[worker]
        while True:
            message = yield self.queue.get()
            self.messages.append(len(message))
            yield self.env.timeout(costs.round_trip)  # the broker's hop
            yield from self.busy(cpu, costs.worker.fixed / 2, "workers")
            yield from self.statement(costs.start, len(message))
            if self.setup.transactional:
                yield from self.run_in_groups(cpu, message)
            else:
                index = 0
                while index < len(message):
                    index, _ = yield from self.run_due(cpu, message, index, math.inf)
                yield from self.statement(costs.success, len(message))
            yield from self.busy(cpu, costs.worker.fixed / 2, "workers")

    def run_due(self, cpu: simpy.Resource, jobs: list[Job], first: int, closes: float | None):
        """Start jobs[first] at its instant once its worker's CPU is free, then, in the same
        hold of the CPU, each next job already due when the slot reaches it, while before
        `closes` (ms; None: a group begins with the first job and closes `group_ms` after
        it ends). Returns the index of the next job and `closes`."""
        wait = jobs[first].due - self.env.now
        if wait > 0:
            yield self.env.timeout(wait)
        with cpu.request() as request:
            yield request
            at, index = max(self.env.now, jobs[first].due), first  # never before its instant
            while True:
                self.record_start(jobs[index], at)
                at += self.costs.worker.per_row
                index += 1
                if closes is None:
                    closes = at + self.setup.group_ms
                if index == len(jobs) or jobs[index].due > at or at >= closes:
                    break
            self.busy_ms["workers"] += at - self.env.now
            yield self.env.timeout(at - self.env.now)
        return index, closes

    def record_start(self, job: Job, at: float) -> None:
        self.started.append(job.id)
        self.lags.append(at - job.due)
        self.last_start = max(self.last_start, at)

    def run_in_groups(self, cpu: simpy.Resource, message: list[Job]):
        """Transactional jobs: a group takes the next job if it is due within GROUP_WAIT_MS
        and before the group closes; a BEGIN, a success statement and a COMMIT each."""
        index, grouped, closes = 0, 0, None  # closes: None while no group is open
        while index < len(message):
            if closes is not None and not self.joins_group(message[index], closes):
                yield from self.commit_group(cpu, grouped)
                grouped, closes = 0, None
            after, closes = yield from self.run_due(cpu, message, index, closes)
            grouped, index = grouped + after - index, after
        yield from self.commit_group(cpu, grouped)

    def joins_group(self, job: Job, closes: float) -> bool:
        now = self.env.now
        return now < closes and job.due <= min(closes, now + GROUP_WAIT_MS)

    def commit_group(self, cpu: simpy.Resource, jobs: int):
        self.groups.append(jobs)
        yield from self.busy(cpu, self.costs.worker_group.at(jobs), "workers")
        yield self.env.timeout(self.costs.round_trip)  # BEGIN
        yield from self.statement(self.costs.group, jobs)
        yield self.env.timeout(self.costs.round_trip)  # COMMIT

    # -- runs -------------------------------------------------------------------------
    def run(self) -> None:
        """Until every job is started and its message done."""
        for index in range(self.setup.dispatchers):
            self.env.process(self.dispatcher(index))
        for worker in range(self.setup.workers):
            for _ in range(self.setup.slots):
                self.env.process(self.slot(worker))
        self.env.run()

    def burst(self, jobs: int) -> float:
        """Seconds from the run time to the last start of `jobs` due at one instant."""
        for job in range(jobs):
            self.pending[job % self.setup.dispatchers].append(Job(job, 0.0))
        self.run()
        return self.last_start / 1000

    def stream(self, rate: float, seconds: float) -> dict:
        """Jobs due evenly at `rate` a second for `seconds`: how late they started, what
        the claims and messages carried, CPU a job and how busy each part was."""
        jobs = int(rate * seconds)
        for job in range(jobs):
            due = self.START_MS + job * 1000 / rate
            self.pending[job % self.setup.dispatchers].append(Job(job, due))
        self.run()
        lags = sorted(self.lags)
        return {
            "jobs": jobs,
            "p50_ms": lags[len(lags) // 2],
            "p99_ms": lags[int(len(lags) * 0.99)],
            "max_ms": lags[-1],
            "jobs_per_claim": jobs / len(self.claims),
            "jobs_per_message": jobs / len(self.messages),
            "jobs_per_group": jobs / len(self.groups) if self.groups else None,
            "cpu_ms_per_job": {part: ms / jobs for part, ms in self.busy_ms.items()},
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


# -- --validate -----------------------------------------------------------------------
MEASURED_BURSTS = [  # docs/BENCHMARKS.md, bench/burst: 2 dispatchers, 2 prefork workers × 2
    ("at-least-once 10,000 (2026-11-22, quiet)", 10_000, False, 11_911),
    ("at-least-once 100,000 (2026-11-22, quiet)", 100_000, False, 11_215),
    ("at-least-once 10,000 (2026-11-24, busy)", 10_000, False, 9_396),
    ("at-least-once 10,000 (2026-11-23, busy, median of 4)", 10_000, False, 5_539),
    ("at-least-once 100,000 (2026-11-23, busy, median of 4)", 100_000, False, 4_757),
    ("transactional 10,000 (2026-11-22, quiet)", 10_000, True, 2_854),
    ("transactional 10,000 (2026-11-24, busy)", 10_000, True, 2_201),
]
# The steady bench's set-up: one dispatcher, two workers prefork -c 1, all on two cores.
BENCH_STEADY = Setup(dispatchers=1, workers=2, slots=1, pg_cores=2, shared_cores=2)
DELIVERIES = {"at_least_once": False, "transactional": True}  # name → transactional


def validate_bursts(costs: Costs) -> None:
    """The measured bursts ran a transaction a transactional job (before the groups)."""
    print("| measured burst | jobs/s measured | jobs/s simulated | simulated / measured |")
    print("|---|--:|--:|--:|")
    for name, jobs, transactional, measured in MEASURED_BURSTS:
        setup = Setup(dispatchers=2, workers=2, slots=2, pg_cores=2, shared_cores=2)
        setup = replace(setup, transactional=transactional, group_ms=0.0)
        _, rate = burst_rate(setup, costs, jobs)
        print(f"| {name} | {measured:,} | {rate:,.0f} | {rate / measured:.2f} |")


# bench/steady's other rates of the sitting steady.json's runs came from (docs/BENCHMARKS.md,
# "Search rows written once", 2026-12-02 12:26–12:40, the curve after): CPU ms a job and
# the start lag's p99; their statements were not kept.
MEASURED_STEADY = [
    ("at_least_once", 100, {"postgres": 0.98, "dispatcher": 1.03, "workers": 1.215}, 0.4),
    ("at_least_once", 3000, {"postgres": 0.20, "dispatcher": 0.10, "workers": 0.293}, 3797),
    ("transactional", 100, {"postgres": 1.47, "dispatcher": 1.12, "workers": 1.622}, 0.2),
    ("transactional", 3000, {"postgres": 0.25, "dispatcher": 0.08, "workers": 0.260}, 3191),
]
# At 1,000 jobs/s the packing turns on the slowest handler the workers report: up to 0.5
# ms a round of 20 is one message, up to 1.5 ms two. The bench does not record it.
SLOWEST_HANDLERS_MS = (0.0, 1.0)


def steady_measurements(path: Path) -> list[tuple[str, int, float, dict, float, dict]]:
    """(delivery, rate, seconds, CPU ms a job, lag p99, what its calls carried) of every
    Tempo run of steady.json, and of MEASURED_STEADY at the rates it does not have."""
    data = json.loads(path.read_text())
    seconds = data["args"]["seconds"]
    runs = [r for r in data["runs"] if r["side"] == "tempo"]
    rows = [
        (r["delivery"], r["rate"], seconds, r["cpu_ms_per_job"], r["lag_p99_ms"], shapes(r))
        for r in runs
    ]
    had = {(r["delivery"], r["rate"]) for r in runs}
    for delivery, rate, cpu, p99 in MEASURED_STEADY:
        if (delivery, rate) not in had:
            rows.append((delivery, rate, 60.0, cpu, p99, {}))
    return sorted(rows, key=lambda row: (row[0], row[1]))


def validate_steady(costs: Costs, path: Path = STEADY) -> None:
    """Each measured steady run simulated at its own rate, delivery and set-up."""
    print(
        "| delivery | jobs/s | slowest handler ms | PG CPU ms a job | dispatcher | workers"
        " | due → started p99 ms | jobs a claim | jobs a message | jobs a group |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for measurement in steady_measurements(path):
        rate = measurement[1]
        for slowest_ms in SLOWEST_HANDLERS_MS if rate == FIT_RATE else (0.0,):
            print(steady_row(costs, measurement, slowest_ms))


def steady_row(costs: Costs, measurement: tuple, slowest_ms: float) -> str:
    delivery, rate, seconds, measured, p99, carried = measurement
    setup = replace(BENCH_STEADY, transactional=DELIVERIES[delivery], slowest_handler_ms=slowest_ms)
    model = Model(setup, costs).stream(rate, seconds)
    simulated = model["cpu_ms_per_job"]
    cells = [
        delivery.replace("_", "-"),
        f"{rate:,}",
        f"{slowest_ms:g}",
        compare(simulated["postgres"], measured["postgres"]),
        compare(simulated["dispatchers"], measured["dispatcher"]),
        compare(simulated["workers"], measured["workers"]),
        compare(model["p99_ms"], p99, digits=1),
    ]
    for name in ("jobs_per_claim", "jobs_per_message", "jobs_per_group"):
        cells.append(compare(model[name], carried.get(name), digits=1, ratio=False))
    return f"| {' | '.join(cells)} |"


def shapes(run: dict) -> dict[str, float | None]:
    """What the run's claims, messages and groups carried (rows a statement)."""
    transactional = run["delivery"] == "transactional"
    message = STEADY_START if transactional else STEADY_SUCCESS
    return {
        "jobs_per_claim": steady_statement(run, CLAIM).rows,
        "jobs_per_message": steady_statement(run, message).rows,
        "jobs_per_group": steady_statement(run, STEADY_SUCCESS).rows if transactional else None,
    }


def compare(simulated: float | None, measured: float | None, digits: int = 3, ratio=True) -> str:
    """'simulated / measured (ratio)'; the simulated figure alone where none was measured;
    '—' where it does not apply."""
    if simulated is None:
        return "—"
    if measured is None:
        return f"{simulated:.{digits}f}"
    text = f"{simulated:.{digits}f} / {measured:.{digits}f}"
    return f"{text} ({simulated / measured:.2f})" if ratio and measured else text


# -- --extrapolate ----------------------------------------------------------------------
BURSTS = [(2, 2, 2), (16, 100, 8), (100, 1000, 16), (100, 1000, 64)]
STREAMS = [  # dispatchers, worker processes, PG cores, jobs/s
    (2, 2, 2, 200),
    (1, 2, 2, 1_000),
    (1, 20, 4, 3_000),  # 60 jobs a round: cut by the fan-out, not packed
    (2, 20, 4, 3_000),
    (16, 100, 8, 2_000),
    (16, 100, 16, 10_000),
    (100, 1000, 16, 10_000),
    (100, 1000, 64, 30_000),
]


def delivery_name(transactional: bool) -> str:
    return "transactional" if transactional else "at-least-once"


def extrapolate_bursts(costs: Costs) -> None:
    print("| dispatchers | workers × slots | PG cores | delivery | burst | seconds | jobs/s |")
    print("|--:|--:|--:|---|--:|--:|--:|")
    for dispatchers, workers, pg_cores in BURSTS:
        for transactional in (False, True):
            for jobs in (100_000, 1_000_000):
                setup = Setup(dispatchers, workers, 2, pg_cores, transactional=transactional)
                seconds, rate = burst_rate(setup, costs, jobs)
                print(
                    f"| {dispatchers} | {workers} × 2 | {pg_cores} | {delivery_name(transactional)}"
                    f" | {jobs:,} | {seconds:.1f} | {rate:,.0f} |"
                )


def extrapolate_streams(costs: Costs, slowest_handler_ms: float) -> None:
    print(
        "| dispatchers | workers × slots | PG cores | delivery | jobs/s | jobs a claim"
        " | jobs a message | PG CPU ms a job | due → started p99 (ms) | PG busy"
        " | dispatchers busy | workers busy |"
    )
    print("|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for dispatchers, workers, pg_cores, rate in STREAMS:
        for transactional in (False, True):
            setup = Setup(
                dispatchers,
                workers,
                2,
                pg_cores,
                transactional=transactional,
                slowest_handler_ms=slowest_handler_ms,
            )
            result = Model(setup, costs).stream(rate, seconds=max(5.0, 50_000 / rate))
            print(
                f"| {dispatchers} | {workers} × 2 | {pg_cores} | {delivery_name(transactional)}"
                f" | {rate:,} | {result['jobs_per_claim']:.1f} | {result['jobs_per_message']:.1f}"
                f" | {result['cpu_ms_per_job']['postgres']:.3f} | {result['p99_ms']:.1f}"
                f" | {result['postgres']:.0%} | {result['dispatchers']:.0%}"
                f" | {result['workers']:.0%} |"
            )


# -- --sizing -------------------------------------------------------------------------
PEAK_OVER_MEAN = 1.12  # golden phases, busiest second of a daily task (bench/planning)
HEADROOM = 0.5  # size every part to run at most half busy at the peak
RETENTION_DAYS = 7  # finished rows kept (pruning them is the operator's job: docs/SCALING.md)
INSERT_WAL_BYTES = 2_000  # a job's insert since the search rows (docs/SCALING.md, measured)
MEMBERS = (1_000_000, 10_000_000, 100_000_000, 1_000_000_000)


def fewest_dispatchers(rate: float, fanout: int) -> int:
    """Two for failover, more where a round would carry more than FANOUT jobs: its messages
    would then be cut by the fan-out (two jobs or more each), not packed."""
    return max(2, math.ceil(rate * CLAIM_ROUND_MS / 1000 / fanout))


def sized(rate: float, costs: Costs, setup: Setup) -> tuple[Setup, dict]:
    """The smallest set-up from `setup` up that carries `rate` jobs/s spread evenly with
    every part at most HEADROOM busy, found by simulating."""
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


def sizing(costs: Costs, slowest_handler_ms: float, steady: Path = STEADY) -> None:
    """A daily task over each population: what one core of each part carries at the peak
    second, the set-up the model needs, WAL and table size from the measured figures."""
    row_bytes = sum(burst_run("at_least_once")["table_bytes_per_job"].values())
    carried, setups = [], []
    for members in MEMBERS:
        peak = members / 86_400 * PEAK_OVER_MEAN
        for transactional in (False, True):
            start = Setup(
                dispatchers=fewest_dispatchers(peak, 32),
                workers=2,
                slots=4,
                pg_cores=2,
                transactional=transactional,
                slowest_handler_ms=slowest_handler_ms,
            )
            setup, result = sized(peak, costs, start)
            cpu = result["cpu_ms_per_job"]
            per_core = {part: members * HEADROOM * 1000 / (peak * ms) for part, ms in cpu.items()}
            name = f"| {members:,} | {delivery_name(transactional)} | {peak:,.0f}"
            carried.append(
                f"{name} | {result['jobs_per_claim']:.1f} | {result['jobs_per_message']:.1f}"
                f" | {cpu['postgres']:.3f} | {millions(per_core['postgres'])}"
                f" | {cpu['workers']:.3f} | {millions(per_core['workers'])}"
                f" | {cpu['dispatchers']:.3f} | {millions(per_core['dispatchers'])} |"
            )
            delivery = "transactional" if transactional else "at_least_once"
            wal_bytes = steady_run(delivery, steady)["wal_bytes_per_job"] + INSERT_WAL_BYTES
            table = members * (RETENTION_DAYS + 1) * row_bytes
            setups.append(
                f"{name} | {setup.pg_cores} ({result['postgres']:.0%})"
                f" | {setup.dispatchers} | {setup.workers} × {setup.slots}"
                f" ({result['workers']:.0%}) | {result['p99_ms']:.1f}"
                f" | {members * wal_bytes / 2**30:,.0f} GiB | {table / 2**30:,.0f} GiB |"
            )
    print(
        "| members (jobs/day) | delivery | peak jobs/s | jobs a claim | jobs a message"
        " | PG CPU ms a job | members a PG core carries | worker CPU ms a job"
        " | members a worker core carries | dispatcher CPU ms a job"
        " | members a dispatcher core carries |"
    )
    print("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    print("\n".join(carried))
    print(
        "\n| members (jobs/day) | delivery | peak jobs/s | PG cores (busy) | dispatchers"
        " | worker processes × slots (busy) | due → started p99 (ms) | WAL/day"
        " | jobs table, 7 days kept |"
    )
    print("|--:|---|--:|--:|--:|--:|--:|--:|--:|")
    print("\n".join(setups))


def millions(members: float) -> str:
    return f"{members / 1e6:,.0f}M"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--extrapolate", action="store_true")
    parser.add_argument("--sizing", action="store_true")
    parser.add_argument(
        "--round-trip-ms", type=float, default=0.5, help="between hosts: --extrapolate, --sizing"
    )
    parser.add_argument(
        "--slowest-handler-ms", type=float, default=0.0, help="--extrapolate, --sizing"
    )
    parser.add_argument("--steady", type=Path, default=STEADY, help="bench/steady's results")
    args = parser.parse_args()
    costs = measured_costs(steady=args.steady)
    between_hosts = replace(costs, round_trip=args.round_trip_ms)
    if args.sizing:
        sizing(between_hosts, args.slowest_handler_ms, args.steady)
        return
    print(f"costs (ms of CPU), loopback:\n{costs}\n")
    if args.validate or not args.extrapolate:
        print("Spread evenly: simulated / measured (ratio), the steady bench's set-up\n")
        validate_steady(costs, args.steady)
        print("\nBursts\n")
        validate_bursts(costs)
        print()
    if args.extrapolate or not args.validate:
        print(f"Between hosts: {args.round_trip_ms} ms round trips\n")
        extrapolate_bursts(between_hosts)
        print()
        extrapolate_streams(between_hosts, args.slowest_handler_ms)


if __name__ == "__main__":
    main()
