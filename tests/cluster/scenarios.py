"""Network partitions on the multi-host rig, as scenarios a test asserts and a bench
repeats: three hosts, each with a dispatcher and a worker; one host is cut off from
PostgreSQL (or from Redis) while jobs fall due and handlers run on it, then healed.

Each scenario checks what must hold — its partitions move to the other hosts within the
bound, nothing runs twice beyond what its delivery mode allows, nothing is lost, nothing
starts early, the cut-off host's handlers cannot commit once their leases are gone
(fencing), it rejoins on heal — and returns what it measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.cluster.rig import Rig
from tests.handlers.recording import KEYED_EFFECTS_TABLE, STARTED_TABLE
from tests.processes.inflight import effects, insert_blocking, jobs, starts, wait_until_running
from tests.processes.support import (
    EFFECTS_TABLE,
    PARTITION_LOCK_CLASS,
    effect_counts,
    insert_jobs,
    partitions_by_session,
    wait_for,
)

# The rig's processes coordinate every 0.5 s: a peer silent for ten rounds (5 s) is ended
# by the others; with the default 2 s rounds that is 20 s. Slack for a loaded machine.
TAKEOVER_BOUND_S = 30.0
BLOCK_S = 20.0  # the first attempt of the in-flight jobs blocks this long
STREAM = 120  # jobs due evenly over 20 s from 2 s before the cut
SPREAD_S = 20.0
MODES = ("transactional", "at_least_once", "at_most_once")
RECORD = "tests.handlers.recording.record"

PARTITIONS_BY_ADDRESS = """
SELECT host(a.client_addr), count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s
GROUP BY 1
"""


@dataclass(frozen=True)
class Figures:
    takeover_s: float  # from the cut until the other hosts own all 16 partitions
    late_jobs: int  # stream jobs started over 1 s after their run time
    worst_lag_s: float
    rejoin_s: float  # from the heal until the host owns partitions again


def partitions_by_host(conn, rig: Rig) -> dict[str, int]:
    by_address = dict(conn.execute(PARTITIONS_BY_ADDRESS, [PARTITION_LOCK_CLASS]).fetchall())
    return {host.name: by_address.get(host.address, 0) for host in rig.hosts}


def start_everywhere(rig: Rig, conn) -> None:
    for host in rig.hosts:
        rig.dispatcher(host.name)
        rig.worker(host.name, concurrency=12)  # room beside the blocked handlers
    try:
        wait_for(
            lambda: partitions_by_session(conn) == [5, 5, 6],
            timeout=60,
            message="16 partitions shared by three hosts",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{start_report(rig, conn)}") from None
    wait_for(
        lambda: conn.execute("SELECT count(*) FROM tasksapp_workerprocess").fetchone()[0] >= 3,
        timeout=60,
        message="three workers ready",
    )


def start_report(rig: Rig, conn, lines: int = 15) -> str:
    """What a start that did not settle looked like: partitions per session and per host,
    which processes still run, and the end of each dispatcher's log."""
    report = [
        f"partitions by session: {partitions_by_session(conn)}",
        f"partitions by host: {partitions_by_host(conn, rig)}",
    ]
    for host in rig.hosts:
        cluster = rig.clusters[host.name]
        for name, process in cluster.processes.items():
            report.append(f"{name}: {'running' if process.poll() is None else process.returncode}")
        tail = cluster.log(f"d-{host.name}").splitlines()[-lines:]
        report += [f"  d-{host.name}| {line}" for line in tail]
    return "\n".join(report)


def create_tables(conn) -> None:
    for table in (EFFECTS_TABLE, KEYED_EFFECTS_TABLE, STARTED_TABLE):
        conn.execute(table)


def insert_in_flight(conn) -> dict[str, list[int]]:
    """Jobs of each delivery mode whose first attempt blocks, spread over the hosts."""
    return {
        mode: insert_blocking(conn, count=6, delivery=mode, start=0.5, block=BLOCK_S)
        for mode in MODES
    }


def first_attempts_on(conn, ids: list[int], pid: int) -> set[int]:
    rows = conn.execute(
        "SELECT job_id FROM test_started WHERE attempt = 1 AND pid = %s AND job_id = ANY(%s)",
        [pid, ids],
    ).fetchall()
    return {row[0] for row in rows}


def assert_each_mode_held(conn, in_flight: dict[str, list[int]], cut_pid: int) -> None:
    """Jobs whose first attempt ran on the cut-off host: what their delivery mode promises
    for a worker that vanished. The others: one attempt, one effect."""
    for mode, ids in in_flight.items():
        final = ("succeeded", "lost") if mode == "at_most_once" else ("succeeded",)
        wait_for(
            lambda ids=ids, final=final: all(j["state"] in final for j in jobs(conn, ids).values()),
            timeout=BLOCK_S + 60,
            message=f"{mode} jobs finished",
        )
        cut_off = first_attempts_on(conn, ids, cut_pid)
        rows, done, began = jobs(conn, ids), effects(conn, ids), starts(conn, ids)
        for job_id in ids:
            job, key = rows[job_id], rows[job_id]["key"]
            if job_id not in cut_off:
                assert (job["state"], job["attempts"]) == ("succeeded", 1), (job_id, job)
                assert done[job_id] == [(1, key)], (job_id, done[job_id])
            elif mode == "transactional":  # the cut-off run's effect never committed:
                # it ran again as the same attempt (decision 0020)
                assert (job["state"], job["attempts"]) == ("succeeded", 1), (job_id, job)
                assert [e["kind"] for e in job["errors"]] == ["lost_run"], (job_id, job)
                assert done[job_id] == [(1, key)], (job_id, done[job_id])
            elif mode == "at_least_once":
                assert (job["state"], job["attempts"]) == ("succeeded", 2), (job_id, job)
                assert done[job_id] == [(1, key), (2, key)], (job_id, done[job_id])
            else:
                assert (job["state"], job["attempts"]) == ("lost", 1), (job_id, job)
                assert began[job_id] == [1], (job_id, began[job_id])


def assert_stream_ran_once_on_time(conn, count: int) -> float:
    """Every job of the steady stream ran once, none early; returns the latest start lag."""
    wait_for(
        lambda: conn.execute(
            "SELECT count(*) FROM tasksapp_job WHERE handler = %s AND state = 'succeeded'",
            [RECORD],
        ).fetchone()[0]
        == count,
        timeout=90,
        message=f"all {count} stream jobs succeeded",
    )
    counts = effect_counts(conn)
    assert len(counts) == count and set(counts.values()) == {1}
    early = conn.execute("SELECT count(*) FROM tasksapp_job WHERE started_at < run_at")
    assert early.fetchone()[0] == 0
    return conn.execute(
        "SELECT max(extract(epoch FROM started_at - run_at)) FROM tasksapp_job WHERE handler = %s",
        [RECORD],
    ).fetchone()[0]


def late_jobs(conn, *, over_s: float = 1.0) -> int:
    return conn.execute(
        "SELECT count(*) FROM tasksapp_job WHERE handler = %s"
        " AND started_at - run_at > make_interval(secs => %s)",
        [RECORD, over_s],
    ).fetchone()[0]


def take_over(conn, rig: Rig) -> float:
    cut = time.monotonic()
    wait_for(
        lambda: partitions_by_host(conn, rig) == {"h1": 8, "h2": 8, "h3": 0},
        timeout=TAKEOVER_BOUND_S,
        interval=0.1,
        message="h3's partitions taken by h1 and h2",
    )
    return time.monotonic() - cut


def rejoin(conn, rig: Rig) -> float:
    healed = time.monotonic()
    wait_for(
        lambda: partitions_by_host(conn, rig)["h3"] > 0,
        timeout=90,
        interval=0.25,
        message="h3 rejoined",
    )
    return time.monotonic() - healed


def postgres_cut(rig: Rig) -> Figures:
    """h3 loses PostgreSQL with handlers of every delivery mode running on it."""
    with rig.connect() as conn:
        create_tables(conn)
        start_everywhere(rig, conn)
        in_flight = insert_in_flight(conn)
        every_id = [job_id for ids in in_flight.values() for job_id in ids]
        wait_until_running(conn, every_id)
        cut_pid = rig.pid("w-h3")
        assert first_attempts_on(conn, every_id, cut_pid), "nothing in flight on h3"
        insert_jobs(conn, count=STREAM, start=2, spread=SPREAD_S)
        rig.cut_postgres("h3")
        takeover = take_over(conn, rig)
        assert_each_mode_held(conn, in_flight, cut_pid)
        worst_lag = assert_stream_ran_once_on_time(conn, STREAM)
        rig.heal_postgres("h3")
        return Figures(takeover, late_jobs(conn), worst_lag, rejoin(conn, rig))


def redis_cut(rig: Rig) -> Figures:
    """h3 loses the broker, not the database: its dispatcher must not keep partitions it
    cannot send for; its worker's running handlers finish undisturbed (the database
    carries their outcome)."""
    with rig.connect() as conn:
        create_tables(conn)
        start_everywhere(rig, conn)
        in_flight = insert_blocking(conn, count=9, delivery="transactional", start=0.5, block=8)
        wait_until_running(conn, in_flight)
        insert_jobs(conn, count=STREAM, start=2, spread=SPREAD_S)
        rig.cut_redis("h3")
        takeover = take_over(conn, rig)
        worst_lag = assert_stream_ran_once_on_time(conn, STREAM)
        wait_for(
            lambda: all(j["state"] == "succeeded" for j in jobs(conn, in_flight).values()),
            timeout=60,
            message="the in-flight jobs succeeded",
        )
        assert all(len(done) == 1 for done in effects(conn, in_flight).values())
        rig.heal_redis("h3")
        return Figures(takeover, late_jobs(conn), worst_lag, rejoin(conn, rig))


def lossy_links(rig: Rig, *, share: float = 0.05) -> Figures:
    """Every host loses a share of its packets (TCP resends them): slower round trips,
    but every job runs once and none early; the hosts keep their partitions."""
    with rig.connect() as conn:
        create_tables(conn)
        start_everywhere(rig, conn)
        for host in rig.hosts:
            host.lose(share)
        insert_jobs(conn, count=STREAM, start=2, spread=SPREAD_S)
        worst_lag = assert_stream_ran_once_on_time(conn, STREAM)
        assert partitions_by_session(conn) == [5, 5, 6]
        return Figures(0.0, late_jobs(conn), worst_lag, 0.0)


def far_from_the_servers(rig: Rig) -> Figures:
    """Hosts a round trip away from PostgreSQL and Redis (the rig's `round_trip_ms`):
    every job once, none early; returns how late they started."""
    with rig.connect() as conn:
        create_tables(conn)
        start_everywhere(rig, conn)
        insert_jobs(conn, count=STREAM, start=3, spread=SPREAD_S)
        worst_lag = assert_stream_ran_once_on_time(conn, STREAM)
        return Figures(0.0, late_jobs(conn, over_s=0.1), worst_lag, 0.0)
