"""Django's Tasks API on Tempo (tasksapp.backends): enqueue, run through the worker's own
path (claim, execute_batch), read back; against the real database."""

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone
from django_tasks import TaskResultStatus, default_task_backend
from django_tasks.base import Task
from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
from django_tasks.signals import task_enqueued, task_finished, task_started

from tasksapp.backends import ERR_UNDECLARED, tempo_priority
from tasksapp.engine.models import Job, JobState
from tasksapp.engine.services import JobInputError, job_schedule
from tasksapp.engine.transitions import job_claim_due
from tasksapp.engine.worker.executor import execute_batch
from tests.handlers import tasks_api

pytestmark = pytest.mark.django_db(transaction=True)


def run(*results):
    claims = job_claim_due(ids=[int(r.id) for r in results], owner="d", ttl=10)
    execute_batch([[c.id, c.token, c.run_at_ms] for c in claims])
    for result in results:
        result.refresh()


@pytest.mark.parametrize(
    ("priority", "level"),
    [
        (-100, 0),
        (-81, 0),
        (-80, 1),
        (-21, 3),
        (-1, 4),
        (0, 5),
        (1, 6),
        (25, 6),
        (26, 7),
        (75, 8),
        (76, 9),
        (100, 9),
    ],
)
def test_priorities_map_onto_tempo_levels(priority, level):
    assert tempo_priority(priority) == level


def test_backend_features():
    backend = default_task_backend
    assert backend.supports_defer and backend.supports_get_result and backend.supports_priority


def test_a_task_runs_once_and_its_result_comes_back():
    seen = []
    signals = (task_enqueued, task_started, task_finished)

    def heard(sender, task_result, signal, **kwargs):
        seen.append((signal, task_result.status))

    for signal in signals:
        signal.connect(heard)
    try:
        result = tasks_api.add.using(priority=30, queue_name="default").enqueue(2, 3)
        job = Job.objects.get(id=result.id)
        assert (job.handler, job.priority, job.max_attempts) == (
            "tests.handlers.tasks_api.add",
            7,
            1,
        )
        assert result.status == TaskResultStatus.READY and not result.is_finished
        run(result)
    finally:
        for signal in signals:
            signal.disconnect(heard)
    assert (result.status, result.return_value, result.attempts) == ("SUCCESSFUL", 5, 1)
    again = tasks_api.add.get_result(result.id)
    assert again.return_value == 5 and again.task.priority == 30
    assert again.started_at <= again.finished_at
    assert seen == [
        (task_enqueued, TaskResultStatus.READY),
        (task_started, TaskResultStatus.RUNNING),
        (task_finished, TaskResultStatus.SUCCESSFUL),
    ]


def test_a_task_given_its_context_sees_its_attempt():
    result = tasks_api.attempt.enqueue()
    run(result)
    assert result.return_value == 1


def test_a_failure_comes_back_with_its_class_and_traceback():
    result = tasks_api.fail.enqueue("no such thing")
    run(result)
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is LookupError
    assert error.traceback.startswith("Traceback (most recent call last)")
    assert error.traceback.rstrip().endswith("LookupError: no such thing")
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert Job.objects.get(id=result.id).state == JobState.DEAD


def test_a_task_waits_for_run_after():
    later = timezone.now() + dt.timedelta(hours=1)
    result = tasks_api.add.using(run_after=later).enqueue(1, 1)
    assert Job.objects.get(id=result.id).run_at == later
    assert job_claim_due(ids=[int(result.id)], owner="d", ttl=10) == []
    assert tasks_api.add.get_result(result.id).status == TaskResultStatus.READY


def test_a_task_enqueued_in_a_rolled_back_transaction_is_gone(effects):
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks_api.write.enqueue(7)
        raise RuntimeError("roll back")
    with pytest.raises(TaskResultDoesNotExist):
        tasks_api.write.get_result(result.id)
    assert not Job.objects.exists()


def test_a_task_writes_with_its_success_once(effects):
    result = tasks_api.write.enqueue(8)
    run(result)
    run(result)  # a second delivery finds it done
    assert effects.count(8) == 1


def test_only_declared_tasks_are_enqueued_or_run():
    with pytest.raises(InvalidTaskError) as refused:
        Task(func=tasks_api.plain, backend="default").enqueue(1)
    assert str(refused.value) == ERR_UNDECLARED.format(path="tests.handlers.tasks_api.plain")
    with pytest.raises(JobInputError, match="is not registered"):
        job_schedule(handler="tests.handlers.tasks_api.plain", run_at=timezone.now())
    with pytest.raises(InvalidTaskError, match="Queue 'Bad Queue' is not valid"):
        tasks_api.add.using(queue_name="Bad Queue")
    assert not Job.objects.exists()


def test_a_job_of_another_handler_is_no_task_result():
    job = job_schedule(handler="tests.handlers.recording.noop", run_at=timezone.now())
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(job.id))
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("not-a-number")
