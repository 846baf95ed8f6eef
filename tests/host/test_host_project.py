"""Tempo inside a new Django project, as README's "Use Tempo in your Django project" says:
the wheel built from this checkout installed (not editable) into a fresh virtualenv, a
project made by `django-admin startproject` that adds only the documented settings and
URL, its own app (tests/host/shop) with @task functions and a @job_handler, and the
project's `manage.py tempo_dispatcher` and `manage.py tempo_worker` running against
real PostgreSQL and Redis. The project's script (tests/host/drive.py) enqueues and reads
the results back; this test checks what it saw.

The virtualenv installs nothing from the network: it sees the test virtualenv's packages
(Django, Celery, django-tasks, ...) through a path file, and its own copy of Tempo, the
wheel, before them."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import environ
import psycopg
import pytest

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SOURCES = ("pyproject.toml", "README.md", "tasksapp", "schedapp", "templates", "static")
READY_SECONDS = 90
DRIVE_SECONDS = 240

SETTINGS = """
# --- Tempo (README, "Use Tempo in your Django project") ---
INSTALLED_APPS += ["django_tasks", "django_celery_beat", "rest_framework", "tasksapp", "shop"]
TASKS = {{"default": {{"BACKEND": "tasksapp.backends.TempoBackend"}}}}
CELERY_BROKER_URL = {broker!r}
DATABASES = {{"default": {database!r}}}
"""
# The project's own Celery app, as Celery's Django guide writes it (the variant with one).
CELERY_APP = """import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostproj.settings")
app = Celery("hostproj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""
CELERY_IMPORT = """from .celery import app as celery_app

__all__ = ("celery_app",)
"""
# The project's own base template and login page, where Django looks for them first: Tempo's
# pages must render with Tempo's, and the project's login page stays the project's.
HOST_TEMPLATES = {
    "base.html": "<html><body>HOST-BASE {% block content %}{% endblock %}</body></html>",
    "registration/login.html": "HOST-LOGIN",
}
TEMPLATE_DIRS = """
TEMPLATES[0]["DIRS"] = [BASE_DIR / "templates"]
"""
URLS = """
from django.urls import include  # noqa: E402

urlpatterns += [path("tempo/", include("tasksapp.urls"))]
"""


def run(
    command: list[str], *, cwd: Path, env: dict, timeout: float = 240, stderr: bool = False
) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + (done.stderr if stderr else "")


def host_env() -> dict[str, str]:
    """The environment of a machine that never heard of Tempo's settings: none of the
    TEMPO_*/DJANGO_* variables the test run sets, and nothing of this checkout on the path."""
    drop = ("TEMPO_", "DJANGO_", "DATABASE_URL", "CELERY_", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "PYTHONUNBUFFERED": "1"}


def build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    wheels = tmp_path / "wheels"
    # Built with the installed setuptools where it can build wheels (it needs `wheel`
    # below version 70.1); else pip builds in an isolated environment of its own.
    offline = importlib.util.find_spec("wheel") is not None
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(wheels)]
        + (["--no-build-isolation"] if offline else []),
        cwd=tmp_path,
        env=host_env(),
    )
    (wheel,) = wheels.glob("tempo_scheduler-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_holds_templates_static_files_migrations_and_commands(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in (
        "tasksapp/templates/tempo/base.html",
        "tasksapp/templates/tempo/dashboard/overview.html",
        "tasksapp/templates/tempo/login.html",
        "tasksapp/static/dashboard/dashboard.css",
        "tasksapp/static/vendor/chart-4.5.0.umd.min.js",
        "tasksapp/migrations/0001_jobs.py",
        "tasksapp/management/commands/tempo_worker.py",
        "tasksapp/management/commands/tempo_dispatcher.py",
        "tasksapp/templatetags/tempo.py",
    ):
        assert name in names, name
    # The error pages are the standalone deployment's, not imposed on a project; every
    # other template is under tempo/, so none takes the place of a project's own.
    assert "tasksapp/templates/404.html" not in names
    templates = [n for n in names if n.startswith("tasksapp/templates/")]
    assert templates and all(n.startswith("tasksapp/templates/tempo/") for n in templates)


def make_venv(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, env={})
    python = venv / "bin" / "python"
    purelib = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        cwd=tmp_path,
        env=host_env(),
    ).strip()
    # The test virtualenv's packages, after the venv's own (a path file adds them last).
    Path(purelib, "shared_packages.pth").write_text(site.getsitepackages()[0] + "\n")
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q"]
        + ["--no-index", str(wheel)],
        cwd=tmp_path,
        env=host_env(),
    )
    return python


def database() -> dict:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        pytest.skip("needs PostgreSQL (DATABASE_URL)")
    config = environ.Env.db_url_config(url)
    # A database of each test's own: the two variants may run at once on two workers.
    name = f"{config['NAME']}_host_{uuid.uuid4().hex[:6]}"
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": config["USER"],
        "PASSWORD": config["PASSWORD"],
        "HOST": config["HOST"],
        "PORT": str(config["PORT"] or 5432),
    }


def server(db: dict):
    return psycopg.connect(
        dbname="postgres",
        user=db["USER"],
        password=db["PASSWORD"] or None,
        host=db["HOST"],
        port=db["PORT"],
        autocommit=True,
    )


def make_project(tmp_path: Path, python: Path, db: dict, broker: str, *, with_celery: bool) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    run(
        [str(python), "-m", "django", "startproject", "hostproj", str(project)],
        cwd=tmp_path,
        env=host_env(),
    )
    shutil.copytree(HERE / "shop", project / "shop", ignore=shutil.ignore_patterns("__pycache__"))
    for script in ("drive.py", "kill.py"):
        shutil.copy2(HERE / script, project / script)
    with open(project / "hostproj" / "settings.py", "a") as settings:
        settings.write(SETTINGS.format(broker=broker, database=db) + TEMPLATE_DIRS)
    for name, text in HOST_TEMPLATES.items():
        (project / "templates" / name).parent.mkdir(parents=True, exist_ok=True)
        (project / "templates" / name).write_text(text)
    with open(project / "hostproj" / "urls.py", "a") as urls:
        urls.write(URLS)
    if with_celery:
        (project / "hostproj" / "celery.py").write_text(CELERY_APP)
        (project / "hostproj" / "__init__.py").write_text(CELERY_IMPORT)
    return project


def start(python: Path, project: Path, command: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [str(python), "manage.py", *command],
        cwd=project,
        env=host_env(),
        stdin=subprocess.DEVNULL,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        process_group=0,
    )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_for_line(log: Path, text: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if text in log.read_text():
            return
        assert process.poll() is None, f"exited early:\n{log.read_text()}"
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not logged within {READY_SECONDS} s:\n{log.read_text()}")


@pytest.fixture(params=["tempo's celery app", "the project's celery app"])
def host(request, tmp_path, wheel, private_redis):
    # A broker of its own: the two variants may run at once on two pytest workers, and on
    # one broker each one's workers would take the other's messages (the same queues).
    broker = private_redis.url
    db = database()
    with server(db) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db["NAME"]}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db["NAME"]}"')
    python = make_venv(tmp_path, wheel)
    with_celery = request.param == "the project's celery app"
    project = make_project(tmp_path, python, db, broker, with_celery=with_celery)
    try:
        yield python, project, "hostproj" if with_celery else "tempo"
    finally:
        with server(db) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db["NAME"]}" WITH (FORCE)')


def kill_mid_task(python: Path, project: Path, tmp_path: Path, worker: subprocess.Popen):
    """A transactional Task whose worker is SIGKILLed while it runs (its row written, not
    committed); another worker is started. Returns that worker and what the Task ended as."""
    marker = tmp_path / "held.marker"
    task_id = run([str(python), "kill.py", "enqueue", str(marker)], cwd=project, env=host_env())
    deadline = time.monotonic() + READY_SECONDS
    while not marker.exists():
        assert time.monotonic() < deadline, "the held task never began"
        time.sleep(0.1)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    log = tmp_path / "worker2.log"
    worker = start(python, project, ["tempo_worker", "--queues", "default,reports"], log)
    wait_for_line(log, "ready.", worker)
    result = run(
        [str(python), "kill.py", "result", task_id.strip()],
        cwd=project,
        env=host_env(),
        timeout=DRIVE_SECONDS,
    )
    return worker, json.loads(result)


def test_a_new_project_runs_tasks_and_handlers_on_tempo_from_the_wheel(host, tmp_path):
    python, project, celery_app = host
    run([str(python), "manage.py", "migrate", "-v0"], cwd=project, env=host_env())
    checks = run([str(python), "manage.py", "check"], cwd=project, env=host_env(), stderr=True)
    worker_log, dispatcher_log = tmp_path / "worker.log", tmp_path / "dispatcher.log"
    beat_log = tmp_path / "beat.log"
    worker = start(python, project, ["tempo_worker", "--queues", "default,reports"], worker_log)
    dispatcher = start(python, project, ["tempo_dispatcher"], dispatcher_log)
    beat = start(python, project, ["tempo_beat"], beat_log)
    try:
        wait_for_line(worker_log, "ready.", worker)
        seen = json.loads(
            run([str(python), "drive.py"], cwd=project, env=host_env(), timeout=DRIVE_SECONDS)
        )
        wait_for_line(beat_log, "beat: Starting...", beat)
        worker, killed = kill_mid_task(python, project, tmp_path, worker)
    finally:
        stop(beat)
        stop(dispatcher)
        stop(worker)

    # What the project leaves out is said, and nothing fails: no login lockout, no login
    # page at LOGIN_URL, no Content-Security-Policy.
    assert all(f"tempo.{check}" in checks for check in ("W010", "W011", "W013"))
    assert seen["tasksapp_file"].startswith(str(tmp_path / "venv"))  # the wheel's Tempo
    # The workers ran on the project's Celery app when it has one, on Tempo's otherwise.
    assert seen["celery_app"] == celery_app
    assert f".> app:         {celery_app}:0x" in worker_log.read_text()
    assert seen["plain_status_at_enqueue"] == "READY"
    plain, later, context, failing = (seen[n] for n in ("plain", "later", "context", "failing"))
    assert (plain["status"], plain["return_value"], plain["got_again"]) == (
        "SUCCESSFUL",
        5,
        "SUCCESSFUL",
    )
    assert plain["attempts"] == 1
    assert (later["status"], later["return_value"]) == ("SUCCESSFUL", 9)
    assert (later["priority"], later["queue_name"], later["tempo_priority"]) == (60, "reports", 8)
    assert len(later["ran_at"]) == 1  # once, and not before run_after
    ran_at = dt.datetime.fromisoformat(later["ran_at"][0])
    assert ran_at >= dt.datetime.fromisoformat(later["run_after"])
    assert context["status"] == "SUCCESSFUL"
    assert context["return_value"] == {"name": "weekly", "attempt": 1}
    assert failing["status"] == "FAILED" and failing["return_value"] is None
    (error,) = failing["errors"]
    assert error["class"] == "shop.tasks.OutOfStock"
    assert seen["failing"]["exception_class"] == "OutOfStock"
    assert "Traceback (most recent call last)" in error["traceback"]
    assert "shop.tasks.OutOfStock: sku-1 is out of stock" in error["traceback"]
    assert seen["rolled_back"] == "absent"
    # The framework's signal for each enqueue (the rolled-back one's too, as it was sent).
    assert len(seen["enqueued_signals"]) == 5
    assert {plain["id"], later["id"], context["id"], failing["id"]} <= set(seen["enqueued_signals"])
    assert seen["handler_job"] == "succeeded"
    assert seen["smuggled"]["state"] == "dead"
    assert "is not registered" in seen["smuggled"]["last_error"]
    assert "only declared tasks run" in seen["refusals"]["undeclared_task"]
    assert "is not registered" in seen["refusals"]["other_path"]
    # Each ran once; the rolled-back task and the undeclared function never did.
    assert seen["runs"] == ["add", "later", "report", "restock"]
    assert seen["anonymous_api"] in (401, 403)
    assert seen["anonymous_dashboard"] == 302
    assert seen["pages"] == {"/tempo/": 200, "/tempo/jobs/": 200, "/tempo/api/jobs/": 200}
    assert seen["jobs_page_names_tasks"] is True
    assert seen["login_page"] == 302  # logged in: the login page sends to the dashboard
    # The project's own base.html and registration/login.html take nothing of Tempo's.
    assert seen["login_is_tempos"] is True and seen["pages_are_tempos"] is True
    # The worker SIGKILLed mid-task: its run rolled back and ran again on the next worker,
    # the attempt not counted (the Task has one): SUCCESSFUL, its row written once.
    assert killed == {"status": "SUCCESSFUL", "return_value": "held", "rows": 1}
