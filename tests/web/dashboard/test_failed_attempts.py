"""The overview and its workers' section count failed attempts the same way, from one
selector (failed_attempts): six failed attempts of one job in one worker show as six in
both places, not as one job."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from tasksapp.engine.models import Job, JobState, WorkerProcess
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker import executor
from tasksapp.web.selectors.dashboard import failed_attempts
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)
ATTEMPTS = 6


def fail_six_times_in_this_worker() -> str:
    """One job that fails six attempts, each run by this process's worker code; its
    heartbeat then writes the count to its row. The worker's name."""
    job = JobFactory(
        handler="tests.handlers.recording.fail_until",
        max_attempts=ATTEMPTS + 1,
        retry_policy={"delays": [0]},
    )
    for _ in range(ATTEMPTS):
        Job.objects.filter(id=job.id).update(run_at=timezone.now() - dt.timedelta(seconds=1))
        (claim,) = job_claim_due(ids=[job.id], owner="d", ttl=10)
        executor.execute_batch([[claim.id, claim.token, claim.run_at_ms]])
    keeper = executor.lease_keeper()
    keeper._renew_and_beat()  # the heartbeat, as its thread writes it
    job.refresh_from_db()
    assert (job.state, job.attempts, len(job.errors)) == (JobState.FAILED, ATTEMPTS, ATTEMPTS)
    return keeper.name


def test_six_failed_attempts_on_one_worker_show_as_six_in_both_places(effects, viewer_client):
    name = fail_six_times_in_this_worker()
    WorkerProcess.objects.create(name="idle-worker", hostname="h2", pid=2, succeeded=4)
    counted = failed_attempts(now=timezone.now())
    assert counted.by_worker == {name: ATTEMPTS, "idle-worker": 0} and counted.total == ATTEMPTS
    html = viewer_client.get("/").content.decode()
    overview = re.search(r'id="failed-attempts">([^<]*)<', html).group(1)
    row = html[html.index(f'<td class="mono">{name}</td>') :]
    in_workers = re.search(r"data-failed-attempts>([^<]*)<", row).group(1)
    assert (overview, in_workers) == ("6", "6")
    data = viewer_client.get("/overview.json").json()["failed_attempts"]
    assert data == {"total": ATTEMPTS, "by_worker": {name: ATTEMPTS, "idle-worker": 0}}
