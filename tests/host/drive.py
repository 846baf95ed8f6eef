"""The contract, driven from inside the new project (run with its venv's python, in its
folder): enqueue through Django's Tasks API and Tempo's own service, wait for the
project's dispatcher and worker to run them, and print what came back as JSON."""

import datetime as dt
import json
import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostproj.settings")
import django  # noqa: E402

django.setup()

from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402
from django_tasks import TaskResultStatus  # noqa: E402
from django_tasks.base import Task  # noqa: E402
from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist  # noqa: E402
from django_tasks.signals import task_enqueued  # noqa: E402
from shop import tasks  # noqa: E402
from shop.models import Run  # noqa: E402

import tasksapp  # noqa: E402
from tasksapp.engine.models import Job  # noqa: E402
from tasksapp.engine.services import JobInputError, job_schedule  # noqa: E402
from tasksapp.engine.worker.celery_app import tempo_app  # noqa: E402

WAIT_SECONDS = 90
out: dict = {"tasksapp_file": tasksapp.__file__, "celery_app": tempo_app().main}
enqueued: list[str] = []
task_enqueued.connect(lambda sender, task_result, **kw: enqueued.append(task_result.id))


def wait(result):
    deadline = time.monotonic() + WAIT_SECONDS
    while not result.is_finished and time.monotonic() < deadline:
        time.sleep(0.2)
        result.refresh()
    return result


plain = tasks.add.enqueue(2, 3)
out["plain_status_at_enqueue"] = plain.status
run_after = timezone.now() + dt.timedelta(seconds=3)
later = tasks.add.using(run_after=run_after, priority=60, queue_name="reports").enqueue(
    4, 5, label="later"
)
context = tasks.report.enqueue("weekly")
failing = tasks.reserve.enqueue("sku-1")
try:
    with transaction.atomic():
        rolled_back = tasks.add.enqueue(1, 1, label="rolled_back")
        raise RuntimeError("roll back")
except RuntimeError:
    pass
handler_job = job_schedule(
    handler="shop.job_handlers.restock", run_at=timezone.now(), payload={"sku": "sku-2"}
)

refusals = {}
try:
    Task(func=tasks.not_a_task, backend="default").enqueue(1)
except InvalidTaskError as exc:
    refusals["undeclared_task"] = str(exc)
try:
    job_schedule(handler="os.system", run_at=timezone.now(), payload={})
except JobInputError as exc:
    refusals["other_path"] = str(exc)
# A job row written past the services: refused again where it would run.
smuggled = Job.objects.create(
    handler="shop.tasks.not_a_task", run_at=timezone.now(), max_attempts=1
)
out["refusals"] = refusals
out["enqueued_signals"] = sorted(enqueued)

for name, result in (
    ("plain", plain),
    ("later", later),
    ("context", context),
    ("failing", failing),
):
    wait(result)
    again = tasks.add.get_result(result.id) if result.task.func is tasks.add.func else None
    out[name] = {
        "id": result.id,
        "status": result.status,
        "return_value": result.return_value
        if result.status == TaskResultStatus.SUCCESSFUL
        else None,
        "errors": [
            {"class": e.exception_class_path, "traceback": e.traceback} for e in result.errors
        ],
        "attempts": result.attempts,
        "started_at": result.started_at.isoformat() if result.started_at else None,
        "got_again": again.status if again is not None else None,
        "priority": result.task.priority,
        "queue_name": result.task.queue_name,
    }
out["later"]["run_after"] = run_after.isoformat()
out["later"]["tempo_priority"] = Job.objects.get(id=later.id).priority
out["later"]["ran_at"] = [r.at.isoformat() for r in Run.objects.filter(name="later")]
out["failing"]["exception_class"] = (
    failing.errors[0].exception_class.__name__ if (failing.errors) else None
)
try:
    tasks.add.get_result(rolled_back.id)
    out["rolled_back"] = "found"
except TaskResultDoesNotExist:
    out["rolled_back"] = "absent"

deadline = time.monotonic() + WAIT_SECONDS
while time.monotonic() < deadline:
    states = dict(
        Job.objects.filter(id__in=[handler_job.id, smuggled.id]).values_list("id", "state")
    )
    if states.get(handler_job.id) == "succeeded" and states.get(smuggled.id) == "dead":
        break
    time.sleep(0.2)
smuggled.refresh_from_db()
out["handler_job"] = Job.objects.get(id=handler_job.id).state
out["smuggled"] = {"state": smuggled.state, "last_error": smuggled.last_error}
out["runs"] = sorted(Run.objects.values_list("name", flat=True))

setup_test_environment()
client = Client()
out["anonymous_api"] = client.get("/tempo/api/jobs/").status_code
out["anonymous_dashboard"] = client.get("/tempo/").status_code
anonymous_login = client.get("/tempo/login/").content
out["login_is_tempos"] = b"HOST-LOGIN" not in anonymous_login and b"Tempo" in anonymous_login
from django.contrib.auth import get_user_model  # noqa: E402

admin = get_user_model().objects.create_superuser("boss", "", "a-long-password-1")
client.force_login(admin)
pages = {path: client.get(path) for path in ("/tempo/", "/tempo/jobs/", "/tempo/api/jobs/")}
out["pages"] = {path: response.status_code for path, response in pages.items()}
out["jobs_page_names_tasks"] = b"shop.tasks.add" in pages["/tempo/jobs/"].content
out["pages_are_tempos"] = all(b"HOST-BASE" not in r.content for r in pages.values())
out["login_page"] = client.get("/tempo/login/").status_code
json.dump(out, sys.stdout, default=str)
