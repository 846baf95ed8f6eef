"""The scheduling-practice exercise, ported faithfully, with the naive demo side by side.

    python -m bench.practice [--duration 600] [--instances 5] [--no-kills]
        [--polling-only] [--shared-workers] [--private-postgres] [--sweep 1 10]

Two fresh databases get the same workload at the same moments: ours and the exercise's
naive demo scheduler. As in the exercise, an instance both fetches and executes: each of
ours is one dispatcher and one Celery worker with --threads slots, started and stopped
together. In HA mode three instances of each are stopped at the same random moments
before the end (one SIGINT, two SIGKILL), each of ours only once its worker has work in
flight. 40 s after the end the exercise's statistics are computed for both, beside the
ideal: what a zero-overhead scheduler would score on the same jobs and slots
(bench/practice/ideal.py). --shared-workers: the earlier topology (N dispatchers, --workers
Celery workers shared by all, one worker SIGKILLed besides). --polling-only: dispatchers
without LISTEN/NOTIFY (TEMPO_DISPATCH_NOTIFY=false). --sweep A B: the exercise's
extended test, one scoring run (no kills) per instance count from A to B, plotted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from tqdm import tqdm

from bench.common import ROOT, BenchDatabase, bench_cluster, table, write_json
from bench.practice import naive
from bench.practice.handlers import EXECUTIONS_TABLE, INFLIGHT_DIR
from bench.practice.ideal import Instance, efficient, excess_by_burst, ideal_delays
from bench.practice.workload import LIVE_LEAD_SECONDS, live_sleep, upfront_offsets

HANDLER = "bench.practice.handlers.process_locked_job"
MAX_DELAY_MS = 30_000
SETTLE_SECONDS = 40  # the exercise waits MaxDelayTime + MinPrepareTime before scoring
KILL_WAIT_SECONDS = 30  # a kill waits this long at most for its victim to run a job

INSERT_OURS = """
INSERT INTO tasksapp_job (handler, payload, run_at, state, attempts, max_attempts,
    retry_policy, delivery, idempotency_key, lease_token, claimed_by, last_error, errors)
SELECT %(handler)s, jsonb_build_object('run_at', r), r, 'scheduled', 0, 5,
    '{"delays": [1, 2, 5]}', 'at_least_once', md5(random()::text || r::text), 0, '', '', '[]'
FROM unnest(%(run_at)s::timestamptz[]) AS r
"""
# The exercise's RunAt: the planned run time, kept in the payload (a retry moves run_at).
PLANNED = "(j.payload->>'run_at')::timestamptz"
INSERT_NAIVE = "INSERT INTO jobs (run_at) SELECT unnest(%(run_at)s::timestamptz[])"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--instances", type=int, default=5)
    parser.add_argument(
        "--workers", type=int, default=8, help="Celery worker processes (--shared-workers)"
    )
    parser.add_argument("--threads", type=int, default=5, help="slots (executions) per worker")
    parser.add_argument(
        "--pool",
        choices=("threads", "prefork"),
        default="threads",
        help="each worker's slots as threads of one process, or as processes (prefork, as "
        "docker-compose.yml runs workers); a SIGKILL ends the worker with its processes",
    )
    parser.add_argument(
        "--shared-workers",
        action="store_true",
        help="the earlier topology: --instances dispatchers and --workers Celery workers "
        "shared by all; the kills stop dispatchers, and one worker is SIGKILLed besides",
    )
    parser.add_argument(
        "--polling-only",
        action="store_true",
        help="dispatchers learn of work only by polling (TEMPO_DISPATCH_NOTIFY=false)",
    )
    parser.add_argument(
        "--private-postgres",
        action="store_true",
        help="run on a PostgreSQL server of the bench's own (many instances need many connections)",
    )
    parser.add_argument(
        "--sweep",
        type=int,
        nargs=2,
        metavar=("FROM", "TO"),
        help="one scoring run (no kills, no naive demo) per instance count, plotted",
    )
    parser.add_argument(
        "--one-per-message",
        action="store_true",
        help="one job per message and -c THREADS per worker (the default but with "
        "--shared-workers), instead of batches run side by side by a -c 1 worker",
    )
    parser.add_argument(
        "--batches",
        action="store_true",
        help="messages of up to THREADS jobs run side by side by a -c 1 worker (the "
        "default with --shared-workers)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the dispatchers and workers (repeatable)",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="round trip between our processes and PostgreSQL and Redis (a delaying proxy "
        "in front of each; the bench's own connection stays direct)",
    )
    parser.add_argument("--no-kills", action="store_true", help="no HA kills")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--seed", type=int, default=20190831)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs, each on fresh databases with the next seed (other kill times); the "
        "worst distance from the ideal is the figure",
    )
    parser.add_argument("--start-delay", type=float, default=30)
    return parser.parse_args()


@dataclass
class Event:
    at: float
    what: str
    action: object = field(repr=False)


@dataclass
class Kill:
    """A planned kill of one instance; it lands once the victim's worker runs a job."""

    at: float
    name: str
    sig: int


class Practice:
    def __init__(self, args, ours: BenchDatabase, baseline: BenchDatabase | None) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.ours, self.baseline = ours, baseline
        self.ours_sql = ours.connect()
        self.naive_sql = baseline.connect() if baseline else None
        # In batch mode a dispatcher's share of a burst travels in messages of up to
        # --threads jobs; each worker takes one message at a time and runs its handlers
        # side by side (never more than --threads at once per process). Otherwise each
        # job is a message and each worker runs --threads of them at once.
        self.batches = _batch_mode(args)
        batching = {"TEMPO_BATCH_PARALLELISM": str(args.threads)} if self.batches else {}
        polling = {"TEMPO_DISPATCH_NOTIFY": "false"} if args.polling_only else {}
        self.inflight = Path(tempfile.mkdtemp(prefix="practice-inflight-"))
        self.proxies = []
        self.cluster = bench_cluster(
            ours.url,
            "practice",
            **batching,
            **polling,
            **{INFLIGHT_DIR: str(self.inflight)},
            **self._latency(args.latency_ms, ours.url),
            **dict(item.split("=", 1) for item in args.env),
        )
        self.naive_procs: dict[str, subprocess.Popen] = {}
        self.events: list[Event] = []
        self.armed: list[Kill] = []
        self.timeline: list[str] = []
        self.slots: dict[str, dict] = {}  # per Celery worker: its lifetime, for the ideal

    def _latency(self, round_trip_ms: float, database_url: str) -> dict[str, str]:
        """Put a delaying proxy in front of PostgreSQL and Redis for our processes."""
        if not round_trip_ms:
            return {}
        from bench.common import BROKER_URL
        from tests.cluster.delay_proxy import DelayProxy

        urls = {}
        for key, url in (("DATABASE_URL", database_url), ("CELERY_BROKER_URL", BROKER_URL)):
            parsed = urlsplit(url)
            proxy = DelayProxy(
                target=f"{parsed.hostname}:{parsed.port}", delay_ms=round_trip_ms / 2
            )
            self.proxies.append(proxy)
            user = f"{parsed.username}@" if parsed.username else ""
            urls[key] = parsed._replace(netloc=f"{user}127.0.0.1:{proxy.port}").geturl()
        return urls

    # -- workload ---------------------------------------------------------------------
    def create(self, run_at: list[dt.datetime]) -> None:
        self.ours_sql.execute(INSERT_OURS, {"handler": HANDLER, "run_at": run_at})
        if self.naive_sql:
            self.naive_sql.execute(INSERT_NAIVE, {"run_at": run_at})

    def prepare(self) -> None:
        self.ours_sql.execute(EXECUTIONS_TABLE)
        if self.naive_sql:
            self.naive_sql.execute(naive.SCHEMA)
        self.t0 = time.time()
        self.since = self.t0 + self.args.start_delay
        self.until = self.since + self.args.duration
        offsets = upfront_offsets(self.args.duration, self.rng)
        self.create([_ts(self.since + o) for o in offsets])
        self.upfront = len(offsets)
        self.ours_sql.execute("SELECT pg_stat_reset()")

    # -- processes --------------------------------------------------------------------
    def plan(self) -> None:
        names = [f"d{i + 1}" for i in range(self.args.instances)]
        if self.args.shared_workers:
            per_worker = 1 if self.batches else self.args.threads
            for i in range(self.args.workers):
                self._worker(f"w{i + 1}", per_worker)
        for name in names:
            at = self.t0 + self.rng.uniform(0, 9)
            self.events.append(Event(at, f"start {name}", lambda n=name: self.start(n)))
        if not self.args.no_kills:
            self._plan_kills(names)
        # As in the exercise, live jobs are written from 10 s before the start on: the
        # first is due about when the upfront ones begin.
        self.next_live = self.since - LIVE_LEAD_SECONDS + live_sleep(self.rng)
        self.live = 0

    def _plan_kills(self, names: list[str]) -> None:
        victims = self.rng.sample(names, 3)
        moments = sorted(self.rng.uniform(self.since, self.until - 10) for _ in victims)
        for name, at, sig in zip(
            victims, moments, [signal.SIGINT, signal.SIGKILL, signal.SIGKILL], strict=True
        ):
            label = f"{signal.Signals(sig).name} {name} planned"
            self.events.append(Event(at, label, functools.partial(self.arm, Kill(at, name, sig))))
        if self.args.shared_workers:
            worker = f"w{self.rng.randrange(self.args.workers) + 1}"
            at = self.rng.uniform(self.since, self.until - 10)
            self.events.append(
                Event(at, f"SIGKILL worker {worker}", lambda: self.kill_worker(worker))
            )

    def _worker(self, name: str, concurrency: int) -> None:
        self.cluster.worker(name, concurrency=concurrency, pool=self.args.pool)
        self.slots[name] = {"start": time.time(), "stop": None, "killed": False}

    def start(self, name: str) -> None:
        """Start instance `name`: its dispatcher, and its own worker unless shared."""
        self.cluster.dispatcher(name)
        if not self.args.shared_workers:
            concurrency = 1 if self.batches else self.args.threads
            self._worker(_worker_of(name), concurrency)
        if self.baseline:
            self.naive_procs[name] = subprocess.Popen(
                [sys.executable, "-m", "bench.practice.naive", self.baseline.url, name],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def arm(self, kill: Kill) -> None:
        if self.args.shared_workers:  # the earlier topology: the dispatcher only, at once
            self.kill(kill.name, kill.sig, inflight=None)
        else:
            self.armed.append(kill)

    def fire_armed(self, now: float) -> None:
        """Kill each armed instance once its worker runs a job (or after the wait)."""
        for kill in list(self.armed):
            running = self.running_on(_worker_of(kill.name))
            if running or now > kill.at + KILL_WAIT_SECONDS:
                self.armed.remove(kill)
                self.kill(kill.name, kill.sig, inflight=running)

    def running_on(self, worker: str) -> int:
        """Jobs the worker's handlers run now (their markers: bench/practice/handlers.py)."""
        pid = self.cluster.processes[worker].pid
        return sum(
            1
            for entry in os.scandir(self.inflight)
            if _in_process_group(int(entry.name.split(".", 1)[0]), pid)
        )

    def kill(self, name: str, sig: int, *, inflight: int | None) -> None:
        self.cluster.kill(name, sig)
        if not self.args.shared_workers:
            self._stop_worker(_worker_of(name), sig)
        if name in self.naive_procs:
            self.naive_procs[name].send_signal(sig)
        what = f"{signal.Signals(sig).name} {name}"
        if inflight is not None:
            what += f" + {_worker_of(name)} ({inflight} jobs in flight)"
        self.timeline.append(f"{time.time() - self.since:+8.1f} s  {what}")

    def kill_worker(self, worker: str) -> None:
        self._stop_worker(worker, signal.SIGKILL)

    def _stop_worker(self, worker: str, sig: int) -> None:
        if sig == signal.SIGKILL:  # the whole instance: a prefork worker's processes too
            os.killpg(self.cluster.processes[worker].pid, sig)
        else:
            self.cluster.kill(worker, sig)
        self.slots[worker].update(stop=time.time(), killed=sig == signal.SIGKILL)

    def run(self) -> None:
        end = self.until + SETTLE_SECONDS
        pending = sorted(self.events, key=lambda e: e.at)
        with tqdm(total=int(end - self.t0), desc="practice", unit="s", disable=None) as bar:
            while time.time() < end:
                now = time.time()
                while pending and pending[0].at <= now:
                    event = pending.pop(0)
                    event.action()
                    self.timeline.append(f"{now - self.since:+8.1f} s  {event.what}")
                self.fire_armed(now)
                if now >= self.next_live and now + 10 < self.until:
                    self.create([_ts(now + LIVE_LEAD_SECONDS)])
                    self.live += 1
                    self.next_live = now + live_sleep(self.rng)
                bar.update(int(now - self.t0) - bar.n)
                time.sleep(0.005 if self.armed else 0.02)

    def stop(self) -> None:
        self.cluster.stop()
        for proxy in self.proxies:
            proxy.stop()
        for process in self.naive_procs.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            process.wait(timeout=15)
        shutil.rmtree(self.inflight, ignore_errors=True)

    def ideal(self) -> tuple[dict, dict[int, float], dict[int, float]]:
        """The zero-overhead scheduler's score on these jobs and these workers' slots; each
        job's delay there and its planned run time, by job id."""
        rows = self.ours_sql.execute(
            f"SELECT j.id, extract(epoch FROM {PLANNED}) FROM tasksapp_job j"
        ).fetchall()
        run_at = {job: float(at) for job, at in rows}
        slots = self.args.threads
        instances = [Instance(**life, slots=slots) for life in self.slots.values()]
        delays = ideal_delays(list(run_at.values()), instances)
        return efficient(delays), dict(zip(run_at, delays, strict=True)), run_at


def _in_process_group(pid: int, group: int) -> bool:
    """Whether `pid` is the worker `group` (each worker leads a session of its own) or one
    of its pool's processes."""
    try:
        return os.getpgid(pid) == group
    except ProcessLookupError:
        return False


def _batch_mode(args) -> bool:
    """Batches by default only in the earlier topology: a 5-slot worker that runs a batch
    of one job (a job alone) takes nothing else meanwhile, its other 4 slots idle."""
    if args.one_per_message:
        return False
    return args.batches or args.shared_workers


def _worker_of(instance: str) -> str:
    return f"w{instance[1:]}"


def _ts(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


# -- scoring ----------------------------------------------------------------------------


def score(
    delays: list[float],
    *,
    total: int,
    completed: int,
    duplicates: int,
    early: int,
    polls: int,
    lost: int,
    reads: int,
) -> dict:
    avg = int(statistics.fmean(delays)) if delays else 0  # the exercise's AVG of integers
    stdev = statistics.stdev(delays) if len(delays) > 1 else 0.0
    late = sum(1 for d in delays if d > MAX_DELAY_MS)
    return {
        "jobs": total,
        "completed": completed,
        "executed_twice": duplicates,
        "started_early": early,
        "late": late,
        "list_queries": polls,
        "failed_claims": lost,
        "single_reads": reads,
        "cost": polls * 100 + lost * 10 + reads,
        "delay_avg_ms": avg,
        "delay_stdev_ms": round(stdev, 2),
        "efficient": round(avg + stdev, 2),
        "pass": completed == total and duplicates == 0 and early == 0 and late == 0,
    }


def score_ours(conn) -> tuple[dict, list[float], dict]:
    total = conn.execute("SELECT count(*) FROM tasksapp_job").fetchone()[0]
    rows = conn.execute(f"""
        SELECT j.id, count(e.id), extract(epoch FROM min(e.executed_at) - {PLANNED}) * 1000,
               j.state = 'succeeded', j.started_at < j.run_at
        FROM tasksapp_job j LEFT JOIN practice_execution e ON e.job_id = j.id
        GROUP BY j.id""").fetchall()
    delays = [float(r[2]) for r in rows if r[1]]
    counters = conn.execute("""
        SELECT COALESCE(sum(polls), 0), COALESCE(sum(claims_lost), 0),
               COALESCE(sum(single_reads), 0), COALESCE(sum(statements), 0),
               COALESCE(sum(reaped), 0), COALESCE(sum(notifications), 0)
        FROM tasksapp_dispatchercounter""").fetchone()
    result = score(
        delays,
        total=total,
        completed=sum(1 for r in rows if r[1] and r[3]),
        duplicates=sum(1 for r in rows if r[1] > 1),
        early=sum(1 for r in rows if r[4]),
        polls=counters[0],
        lost=counters[1],
        reads=counters[2],
    )
    return result, delays, cross_check(conn, total, counters)


def job_rows(conn, since: float) -> dict[int, list]:
    """Every job by id, for a closer look: [due (s after the start), delay ms (its first
    execution), start lag ms (handler began − run time), attempts, the worker that ran it
    last]."""
    rows = conn.execute(
        f"""
        SELECT j.id, extract(epoch FROM {PLANNED}) - %s,
               extract(epoch FROM min(e.executed_at) - {PLANNED}) * 1000,
               extract(epoch FROM j.started_at - {PLANNED}) * 1000, j.attempts, j.claimed_by
        FROM tasksapp_job j LEFT JOIN practice_execution e ON e.job_id = j.id
        GROUP BY j.id ORDER BY 2, 1""",
        [since],
    ).fetchall()
    return {
        job: [round(float(due), 3), _ms(delay), _ms(lag), attempts, worker]
        for job, due, delay, lag, attempts, worker in rows
    }


def _ms(value) -> float | None:
    return None if value is None else round(float(value), 2)


def cross_check(conn, total: int, counters) -> dict:
    """The database's own view: scans of the jobs table, transactions per job."""
    table_stats = conn.execute("""
        SELECT seq_scan, idx_scan, n_tup_ins, n_tup_upd FROM pg_stat_user_tables
        WHERE relname = 'tasksapp_job'""").fetchone()
    commits = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()[0]
    return {
        "jobs_table_seq_scans": table_stats[0],
        "jobs_table_index_scans": table_stats[1],
        "jobs_table_row_updates": table_stats[3],
        "dispatcher_jobs_table_statements": counters[3],
        "reaped": counters[4],
        "notifications": counters[5],
        "transactions_per_job": round(commits / max(total, 1), 2),
        "dispatcher_statements_per_job": round(counters[3] / max(total, 1), 3),
    }


def phases(conn) -> list[dict]:
    """Where the delay goes: run_at → claimed → started → executed (ms percentiles)."""
    from bench.common import summary

    spans = {
        "run_at → claimed": "j.claimed_at - j.run_at",
        "claimed → started": "j.started_at - j.claimed_at",
        "started → handler began": "e.began_at - j.started_at",
        "handler began → executed (83 ms of work)": "e.executed_at - e.began_at",
        "run_at → executed": f"e.executed_at - {PLANNED}",
    }
    rows = []
    for name, span in spans.items():
        values = [
            float(r[0])
            for r in conn.execute(
                f"SELECT extract(epoch FROM {span}) * 1000 FROM tasksapp_job j"
                " JOIN practice_execution e ON e.job_id = j.id"
            ).fetchall()
        ]
        rows.append({"phase": name, **summary(values)})
    return rows


def score_naive(conn) -> tuple[dict, list[float]]:
    total = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    delays = [
        float(r[0])
        for r in conn.execute(
            "SELECT extract(epoch FROM execute_at - run_at) * 1000 FROM jobs WHERE state = 2"
        ).fetchall()
    ]
    actions = dict(
        conn.execute("SELECT action, count(*) FROM worker_logs GROUP BY action").fetchall()
    )
    duplicates = conn.execute(
        "SELECT count(*) FROM (SELECT job_id FROM worker_logs WHERE action = 'COMPLETE'"
        " GROUP BY job_id HAVING count(*) > 1) d"
    ).fetchone()[0]
    result = score(
        delays,
        total=total,
        completed=len(delays),
        duplicates=duplicates,
        early=0,
        polls=actions.get("QUERYLIST", 0),
        lost=actions.get("ACQUIRE_FAILURE", 0),
        reads=actions.get("QUERYJOB", 0),
    )
    return result, delays


def plot(ours: list[float], naive_delays: list[float] | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if naive_delays else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4), squeeze=False)
    axes[0][0].hist([min(d, 200) for d in ours], bins=80, color="#2b7bba")
    axes[0][0].set_title("Tempo: ExecuteAt − RunAt (ms, clipped at 200)")
    axes[0][0].set_xlabel("ms")
    axes[0][0].set_ylabel("jobs")
    if naive_delays:
        axes[0][1].hist([d / 1000 for d in naive_delays], bins=80, color="#d95f02")
        axes[0][1].set_title("Naive demo: ExecuteAt − RunAt (s)")
        axes[0][1].set_xlabel("s")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


COLUMNS = [
    "scheduler",
    "jobs",
    "completed",
    "executed_twice",
    "started_early",
    "late",
    "list_queries",
    "failed_claims",
    "single_reads",
    "cost",
    "delay_avg_ms",
    "delay_stdev_ms",
    "efficient",
    "pass",
]


def run_once(args, *, server: str = "") -> dict:
    """One run of the exercise; everything it measured, the ideal beside it."""
    load_before = os.getloadavg()
    baseline = (
        None
        if args.no_baseline
        else BenchDatabase("tempo_practice_naive", migrate=False, server=server)
    )
    with BenchDatabase("tempo_practice", server=server) as ours:
        if baseline:
            baseline.__enter__()
        practice = Practice(args, ours, baseline)
        try:
            practice.prepare()
            practice.plan()
            practice.run()
        finally:
            practice.stop()
        ours_result, ours_delays, check = score_ours(practice.ours_sql)
        ideal, ideal_by_job, run_at = practice.ideal()
        jobs = job_rows(practice.ours_sql, practice.since)
        executed = {job: row[1] for job, row in jobs.items() if row[1] is not None}
        excess = excess_by_burst(run_at, executed, ideal_by_job)
        # [due, delay, the ideal's delay, start lag, attempts, worker], by due time
        per_job = [[*row[:2], _ms(ideal_by_job.get(job)), *row[2:]] for job, row in jobs.items()]
        rerun = rerun_jobs(practice.ours_sql, practice.since)
        breakdown = phases(practice.ours_sql)
        rows = [{"scheduler": "tempo", **ours_result}, *ideal_rows(ours_result, ideal)]
        naive_delays = None
        if baseline:
            naive_result, naive_delays = score_naive(practice.naive_sql)
            rows.append({"scheduler": "naive demo", **naive_result})
            ratio = {
                k: round(naive_result[k] / max(ours_result[k], 1e-9), 1)
                for k in ("cost", "efficient")
            }
            rows.append({"scheduler": "naive / tempo", **ratio})
        practice.ours_sql.close()
        if practice.naive_sql:
            practice.naive_sql.close()
        if baseline:
            baseline.__exit__(None, None, None)
    return {
        "args": vars(args),
        "results": rows,
        "ideal": ideal,
        "distance_ms": round(ours_result["efficient"] - ideal["efficient"], 2),
        "rerun": rerun,
        "cross_check": check,
        "phases": breakdown,
        "excess_by_burst": excess,
        "jobs": per_job,
        "timeline": practice.timeline,
        "upfront": practice.upfront,
        "live": practice.live,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "delays": (ours_delays, naive_delays),
    }


def ideal_rows(ours: dict, ideal: dict) -> list[dict]:
    return [
        {
            "scheduler": "ideal (zero overhead, same slots)",
            "jobs": ours["jobs"],
            "delay_avg_ms": ideal["avg"],
            "delay_stdev_ms": ideal["stdev"],
            "efficient": ideal["efficient"],
        },
        {
            "scheduler": "tempo − ideal",
            "delay_avg_ms": ours["delay_avg_ms"] - ideal["avg"],
            "delay_stdev_ms": round(ours["delay_stdev_ms"] - ideal["stdev"], 2),
            "efficient": round(ours["efficient"] - ideal["efficient"], 2),
        },
    ]


def rerun_jobs(conn, since: float) -> dict:
    """Jobs that needed a second attempt (a worker killed under them) and jobs over 500 ms
    late, each with when it was due (s after the start) and its attempts' errors; and the
    score of the jobs run at the first attempt: where a distance from the ideal comes from."""
    rows = conn.execute(
        f"""
        SELECT j.attempts, extract(epoch FROM min(e.executed_at) - {PLANNED}) * 1000,
               extract(epoch FROM {PLANNED}) - %s, j.errors
        FROM tasksapp_job j JOIN practice_execution e ON e.job_id = j.id
        GROUP BY j.id""",
        [since],
    ).fetchall()
    slow = [
        {
            "due_s": round(float(at), 1),
            "delay_ms": round(float(delay)),
            "attempts": attempts,
            "errors": [e.get("kind") for e in errors],
        }
        for attempts, delay, at, errors in sorted(rows, key=lambda r: r[2])
        if attempts > 1 or delay > 500
    ]
    first = efficient([float(delay) for attempts, delay, _, _ in rows if attempts == 1])
    return {
        "jobs_rerun": sum(1 for attempts, *_ in rows if attempts > 1),
        "first_attempt_efficient": first["efficient"],
        "slow_or_rerun": slow,
    }


def report(run: dict) -> None:
    load = run["load_average"]
    print(table(run["results"], COLUMNS))
    print(
        f"distance from the ideal: {run['distance_ms']} ms; "
        f"load average before {_load(load['before'])}, after {_load(load['after'])}"
    )
    rerun = run["rerun"]
    print(
        f"jobs re-run: {rerun['jobs_rerun']}; efficient of the jobs run at the first "
        f"attempt: {rerun['first_attempt_efficient']}; re-run or over 500 ms late:"
    )
    for job in rerun["slow_or_rerun"]:
        print(
            f"  due +{job['due_s']} s: {job['delay_ms']} ms late, "
            f"{job['attempts']} attempts {job['errors']}"
        )
    print(table([run["cross_check"]], list(run["cross_check"])))
    print(table(run["phases"], ["phase", "p50", "p95", "p99", "max", "avg"]))
    print(table(run["excess_by_burst"], list(EXCESS_COLUMNS)))
    print("\n".join(run["timeline"]))


EXCESS_COLUMNS = (
    "jobs",
    "n",
    "excess_avg_ms",
    "excess_p50_ms",
    "excess_p95_ms",
    "share_of_excess",
)


def _load(averages) -> str:
    return " / ".join(f"{value:.2f}" for value in averages)


def result_name(args) -> str:
    """The earlier topology keeps its result names; the exercise's own get theirs."""
    if args.shared_workers:
        return "practice"
    return "practice_polling" if args.polling_only else "practice_instances"


def main() -> None:
    args = parse()
    # A SIGTERM (`kill`, a timeout) unwinds like Ctrl-C: each run's instances and the private
    # server are stopped on the way out. Left behind, dispatchers whose database was gone
    # retried for good.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with private_postgres(args.private_postgres) as server:
        if args.sweep:
            from bench.practice.sweep import sweep

            sweep(args, server=server)
            return
        if args.repeat > 1:
            repeat(args, server=server)
            return
        run = run_once(args, server=server)
    report(run)
    ours_delays, naive_delays = run.pop("delays")
    name = result_name(args)
    image = ROOT / "docs" / "images" / f"{name}_delay.png"
    plot(ours_delays, naive_delays, image)
    path = write_json(name, {**run, "plot": str(image.relative_to(ROOT))})
    print(f"wrote {path} and {image}", file=sys.stderr)


def repeat(args, *, server: str) -> None:
    """--repeat N: N runs with seeds `seed`, `seed + 1`, …, each reported as it ends, then
    one line per run and the worst: the kill times differ from run to run."""
    runs = []
    for index in range(args.repeat):
        one = argparse.Namespace(**{**vars(args), "seed": args.seed + index})
        run = run_once(one, server=server)
        run.pop("delays")
        report(run)
        runs.append(_repeat_row(index + 1, one.seed, run))
        print(table(runs, list(runs[0])), flush=True)
    worst = max(runs, key=lambda row: row["from_ideal_ms"])
    print(
        f"worst of {len(runs)}: {worst['from_ideal_ms']} ms from the ideal (run {worst['run']}); "
        f"every run passed: {all(row['pass'] for row in runs)}"
    )
    write_json(f"{result_name(args)}_repeat", {"args": vars(args), "runs": runs})


def _repeat_row(index: int, seed: int, run: dict) -> dict:
    ours = run["results"][0]
    kills = [line.split("s  ", 1) for line in run["timeline"] if "SIG" in line and "+" in line]
    return {
        "run": index,
        "seed": seed,
        "jobs": ours["jobs"],
        "pass": ours["pass"],
        "from_ideal_ms": run["distance_ms"],
        "jobs_rerun": run["rerun"]["jobs_rerun"],
        "kills_s": " ".join(
            f"{moment.strip()}:{what.split()[0]}" for moment, what in kills if "planned" not in what
        ),
        "load_after": round(run["load_average"]["after"][0], 2),
    }


@contextlib.contextmanager
def private_postgres(wanted: bool):
    """A PostgreSQL server of the bench's own (the server URL), or the shared one ("")."""
    if not wanted:
        yield ""
        return
    from tests.processes.support import PrivatePostgres

    server = PrivatePostgres().start()
    try:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET max_connections = 400")
        server.restart()
        yield server.url.rsplit("/", 1)[0]
    finally:
        server.stop()


if __name__ == "__main__":
    main()
