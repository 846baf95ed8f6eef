"""Worker liveness locks against real PostgreSQL sessions: a worker whose lock session
ended is found dead once and its running jobs' leases end; a live one, one that never
held a lock, and every worker just after a server restart are left to their leases."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from tasksapp.engine.cluster.liveness import LivenessLock
from tasksapp.engine.cluster.session import session_connection_params
from tasksapp.engine.cluster.sql import WORKER_LOCK_CLASS
from tasksapp.engine.models import Job, JobState, WorkerProcess
from tasksapp.engine.transitions import job_expire_dead_workers, job_reap_expired
from tests.conftest import THIS_DATABASE
from tests.factories import JobFactory
from tests.processes.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
FAR = dt.timedelta(minutes=10)


def running_job(worker: str) -> Job:
    return JobFactory(
        state=JobState.RUNNING,
        claimed_by=worker,
        attempts=1,
        lease_token=7,
        lease_expires_at=timezone.now() + FAR,
    )


def lock_held(name: str) -> bool:
    """Whether a session holds `name`'s liveness lock: a closed session's backend frees
    it when it exits, a moment after the client has closed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            f" AND classid = %s AND objid = hashtext(%s)::oid AND {THIS_DATABASE}",
            [WORKER_LOCK_CLASS, name],
        )
        return cursor.fetchone()[0] > 0


def lease_ended(job: Job) -> bool:
    job.refresh_from_db()
    return job.lease_expires_at <= timezone.now()


@pytest.fixture
def locks():
    taken: list[LivenessLock] = []

    def take(name: str) -> LivenessLock:
        lock = LivenessLock(name)
        assert lock.ensure()
        taken.append(lock)
        return lock

    yield take
    for lock in taken:
        lock.close()


def test_a_worker_whose_session_ended_is_found_once_and_its_leases_end(locks):
    lock = locks("host:101")
    job, other = running_job("host:101"), running_job("host:102")
    assert job_expire_dead_workers(grace=0) == []  # alive
    assert not lease_ended(job)

    lock.close()  # what the death of the process does to its session
    wait_for(lambda: not lock_held("host:101"), timeout=5, message="the lock freed")
    assert job_expire_dead_workers(grace=0) == ["host:101"]
    assert lease_ended(job)
    assert not lease_ended(other)
    assert WorkerProcess.objects.get(name="host:101").liveness_key is None
    assert job_expire_dead_workers(grace=0) == []  # found once


def test_a_live_worker_a_worker_without_a_lock_and_a_restart_are_left_to_leases(locks):
    locks("host:201")
    WorkerProcess.objects.create(name="host:202", hostname="host", pid=202)  # no lock
    jobs = [running_job("host:201"), running_job("host:202")]
    assert job_expire_dead_workers(grace=0) == []
    # a dead one within `grace` of the server's start: not judged (every session ended then)
    dead = LivenessLock("host:203")
    assert dead.ensure()
    jobs.append(running_job("host:203"))
    dead.close()
    wait_for(lambda: not lock_held("host:203"), timeout=5, message="the lock freed")
    assert job_expire_dead_workers(grace=10**9) == []
    assert not any(lease_ended(job) for job in jobs)
    assert job_expire_dead_workers(grace=0) == ["host:203"]


def test_a_name_whose_lock_another_session_holds_registers_no_key(locks):
    locks("host:301")
    second = LivenessLock("host:301")
    assert not second.ensure()
    assert not second.held
    assert WorkerProcess.objects.get(name="host:301").liveness_key is not None  # the first's


def test_a_lost_session_is_noticed_and_the_lock_taken_again(locks):
    lock = locks("host:401")
    pid = lock._conn.info.backend_pid
    with psycopg.connect(**session_connection_params(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])  # and its exit
    assert lock.ensure()  # SELECT 1 fails on the ended session: a new one, the lock again
    assert lock._conn.info.backend_pid != pid
    assert job_expire_dead_workers(grace=0) == []


def test_threads_asking_at_once_share_one_session_and_the_lock_stays_held(monkeypatch):
    """Every thread that starts a batch asks for the lock: racing takes must not open
    second sessions that fail and, closing, drop the first one's lock."""
    import threading

    from tasksapp.engine.cluster import liveness

    opened = []
    connect = liveness._connect

    def counting_connect():
        opened.append(1)
        return connect()

    monkeypatch.setattr(liveness, "_connect", counting_connect)
    lock = LivenessLock("host:501")
    barrier = threading.Barrier(8)

    def ask() -> None:
        barrier.wait()
        try:
            lock.ensure()
        finally:
            connection.close()  # the thread's own Django connection (the taker registers)

    try:
        threads = [threading.Thread(target=ask) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert lock.held
        assert len(opened) == 1  # one session, taken once
        assert job_expire_dead_workers(grace=0) == []  # its lock is held
    finally:
        lock.close()


def test_a_dead_workers_jobs_whose_start_it_deferred_count_their_attempt_and_end(locks):
    """Jobs the worker held still `claimed` (their start deferred) have their leases
    ended; the reaper then fails the attempt each died in, counted."""
    lock = locks("host:111")
    held, moved_on = (
        JobFactory(
            state=JobState.CLAIMED,
            claimed_by="d1",
            attempts=1,  # as their claims counted them
            lease_token=token,
            delivery="at_least_once",
            lease_expires_at=timezone.now() + FAR,
        )
        for token in (4, 9)
    )
    WorkerProcess.objects.filter(name="host:111").update(
        held={str(held.id): 4, str(moved_on.id): 8}  # moved_on: claimed again since
    )
    lock.close()
    wait_for(lambda: not lock_held("host:111"), timeout=5, message="the lock freed")
    assert job_expire_dead_workers(grace=0) == ["host:111"]
    assert lease_ended(held) and not lease_ended(moved_on)
    assert job_reap_expired(partitions=16, owned=list(range(16))).count == 1
    held.refresh_from_db()
    assert held.state == JobState.FAILED and held.attempts == 1
    assert [(e["attempt"], e["kind"]) for e in held.errors] == [(1, "lease_expired")]
    moved_on.refresh_from_db()
    assert moved_on.state == JobState.CLAIMED and moved_on.attempts == 1
