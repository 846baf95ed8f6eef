"""Users in each role, logged-in clients, and a little data for the dashboard's and the
API's tests (imported by their conftest files)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tasksapp.engine.models import Dispatcher, DispatcherCounter, Job, JobState, WorkerProcess
from tasksapp.web.operators import roles_ensure
from tasksapp.web.tokens import api_token_issue

HANDLER = "tests.handlers.recording.record"


@pytest.fixture
def roles(db):
    roles_ensure()  # also after a flush (transactional tests), when the migration's are gone


def _user(name: str, group: str | None, **extra) -> User:
    user = User.objects.create_user(name, password=f"{name}-password-1", **extra)
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def viewer(roles) -> User:
    return _user("vera", "viewer")


@pytest.fixture
def operator(roles) -> User:
    return _user("otto", "operator")


@pytest.fixture
def stranger(roles) -> User:
    """Logged in, but in no group."""
    return _user("sam", None)


@pytest.fixture
def viewer_client(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


@pytest.fixture
def operator_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def api_client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        _, key = api_token_issue(owner=user, name="tests", trusted=True)
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def viewer_api(viewer) -> APIClient:
    return api_client_for(viewer)


@pytest.fixture
def operator_api(operator) -> APIClient:
    return api_client_for(operator)


def make_job(state: str = JobState.SCHEDULED, **fields) -> Job:
    now = timezone.now()
    values = {"handler": HANDLER, "run_at": now + dt.timedelta(hours=1), "state": state}
    values.update(fields)
    return Job.objects.create(**values)


@pytest.fixture
def activity(db):
    """An hour of finished jobs, a live and a dead dispatcher, a worker, counters."""
    now = timezone.now()
    jobs = []
    for i in range(30):
        run_at = now - dt.timedelta(minutes=i + 1)
        state = JobState.SUCCEEDED if i % 10 else JobState.DEAD
        jobs.append(
            Job(
                handler=HANDLER,
                run_at=run_at,
                state=state,
                attempts=2 if i % 5 == 0 else 1,
                claimed_at=run_at,
                started_at=run_at + dt.timedelta(milliseconds=10 * (i + 1)),
                finished_at=run_at + dt.timedelta(milliseconds=10 * (i + 1) + 5),
            )
        )
    Job.objects.bulk_create(jobs)
    Dispatcher.objects.create(name="disp-a", hostname="h1", pid=11, partitions=[0, 1, 2, 3])
    Dispatcher.objects.create(
        name="disp-gone",
        hostname="h2",
        pid=12,
        heartbeat_at=now - dt.timedelta(minutes=5),
        partitions=[4],
    )
    WorkerProcess.objects.create(name="worker-1", hostname="h1", pid=21, running=2, succeeded=27)
    minute = now.replace(second=0, microsecond=0)
    DispatcherCounter.objects.create(
        dispatcher="disp-a",
        minute=minute,
        polls=3,
        claims=27,
        claims_lost=1,
        single_reads=2,
        statements=40,
    )
    return jobs


def run_demo_graph(*, wants=("friends",), failure_rate: float = 0.0, latency_scale: float = 0.0):
    """Schedule a demo graph job (tasksapp/graphs/demo_tasks.py) and run all
    its jobs in this process, as a worker would. Needs a transactional database."""
    from tasksapp.graphs.models import Strategy
    from tasksapp.graphs.services import graph_job_schedule
    from tests.graphs.conftest import drain

    graph = graph_job_schedule(
        has={"user_id": 7, "latency_scale": latency_scale, "failure_rate": failure_rate},
        wants=list(wants),
        strategy=Strategy.ABORT,
    )
    drain()
    graph.refresh_from_db()
    return graph
