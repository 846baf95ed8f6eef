"""End to end in headless Chromium (Debian's `chromium` and `chromium-driver`, never a
downloaded browser): log in, watch the overview refresh with live data, open a recurring
task's plan, cancel a job as an operator, be refused as a viewer.

Every page is saved as a screenshot: into $TEMPO_SCREENSHOTS if set (the committed ones
in docs/screenshots/ come from `TEMPO_SCREENSHOTS=docs/screenshots`), else into the
test's temporary folder.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import random
from pathlib import Path

import pytest
from django.utils import timezone

from tasksapp.engine.models import Dispatcher, DispatcherCounter, Job, JobState, WorkerProcess
from tasksapp.graphs.models import GraphState
from tasksapp.recurring.services import member_create_many, recurring_task_create, slice_plan
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER, make_job, run_demo_graph

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTH, HEIGHT = 1440, 900

pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="headless Chromium is missing: apt-get install chromium chromium-driver",
    ),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(scope="module")
def browser():
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        f"--window-size={WIDTH},{HEIGHT}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture
def shots(tmp_path):
    folder = Path(os.environ.get("TEMPO_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)

    def take(driver, name: str) -> Path:
        """The whole page, not only the window (Chrome DevTools' full-size capture)."""
        size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        height = max(HEIGHT, min(int(size["height"]) + 1, 5000))
        metrics = {"width": WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        try:
            shot = driver.execute_cdp_cmd(
                "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
            )
        finally:
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        path = folder / f"{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    return take


def wait(driver, condition, timeout: float = 10.0):
    """Wait for `condition`; an element replaced by the page's live refresh while it was
    read (stale) is read again at the next poll."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (StaleElementReferenceException,)
    return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=ignored).until(
        condition
    )


def login(driver, live_server, username: str) -> None:
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(f"{live_server.url}/login/")
    driver.find_element(By.ID, "id_username").send_keys(username)
    driver.find_element(By.ID, "id_password").send_keys(f"{username}-password-1")
    driver.find_element(By.ID, "login-submit").click()
    wait(driver, lambda d: d.current_url.rstrip("/") == live_server.url)


def activity() -> None:
    """An hour of work at a realistic pace, two dispatchers, two workers, a day of
    counters: enough for every chart to have something to draw."""
    rng = random.Random(7)
    now = timezone.now()
    jobs = []
    for i in range(900):
        run_at = now - dt.timedelta(seconds=i * 4 + rng.random())
        lag = dt.timedelta(milliseconds=rng.lognormvariate(2.5, 0.6))
        failed = rng.random() < 0.04
        jobs.append(
            Job(
                handler=HANDLER,
                run_at=run_at,
                state=JobState.DEAD if failed else JobState.SUCCEEDED,
                attempts=2 if rng.random() < 0.06 else 1,
                claimed_at=run_at,
                started_at=run_at + lag,
                finished_at=run_at + lag + dt.timedelta(milliseconds=30),
                last_error="ValueError: upstream said no" if failed else "",
            )
        )
    for i in range(120):
        jobs.append(Job(handler=HANDLER, run_at=now + dt.timedelta(minutes=i)))
    Job.objects.bulk_create(jobs)
    Dispatcher.objects.create(
        name="dispatcher-1", hostname="node-a", pid=4101, partitions=list(range(8))
    )
    Dispatcher.objects.create(
        name="dispatcher-2", hostname="node-b", pid=4102, partitions=list(range(8, 16))
    )
    WorkerProcess.objects.create(
        name="worker-a", hostname="node-a", pid=5101, running=3, succeeded=4120, failed=37
    )
    WorkerProcess.objects.create(
        name="worker-b", hostname="node-b", pid=5102, running=1, succeeded=3987, failed=41
    )
    top = now.replace(minute=0, second=0, microsecond=0)
    counters = []
    for hour in range(24):
        for name in ("dispatcher-1", "dispatcher-2"):
            claims = 400 + rng.randrange(200)
            counters.append(
                DispatcherCounter(
                    dispatcher=name,
                    minute=top - dt.timedelta(hours=hour),
                    polls=15,
                    claims=claims,
                    claims_lost=rng.randrange(3),
                    single_reads=rng.randrange(5),
                    statements=claims // 40 + 20,
                )
            )
    DispatcherCounter.objects.bulk_create(counters)


def test_login_and_live_overview(browser, live_server, viewer, shots):
    from selenium.webdriver.common.by import By

    activity()
    browser.get(f"{live_server.url}/")
    assert "/login/" in browser.current_url
    shots(browser, "01-login")
    login(browser, live_server, "vera")
    tiles = wait(
        browser,
        lambda d: {
            t.get_attribute("data-state"): t.text for t in d.find_elements(By.CSS_SELECTOR, ".tile")
        },
    )
    assert tiles["scheduled"].startswith("120")
    assert "dispatcher-1" in browser.page_source and "worker-b" in browser.page_source
    # Throughput, the 90-day history and the cost charts.
    wait(browser, lambda d: d.execute_script("return Object.keys(Chart.instances).length") == 3)
    shots(browser, "02-overview")
    # Live: a new job appears in the tiles at the next refresh, without reloading the page.
    make_job()
    browser.execute_script("window.__marker = 1")
    wait(
        browser,
        lambda d: d.find_element(
            By.CSS_SELECTOR, '.tile[data-state="scheduled"] .n'
        ).text.startswith("121"),
        timeout=25,
    )
    assert browser.execute_script("return window.__marker") == 1  # same page, refreshed part
    assert browser.find_element(By.CSS_SELECTOR, "[data-role]").text == "viewer"


def test_recurring_task_plan(browser, live_server, viewer, shots):
    from selenium.webdriver.common.by import By

    epoch = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    task = recurring_task_create(
        name="nightly profile sync",
        handler=HANDLER,
        period=dt.timedelta(days=1),
        slices=24,
        epoch=epoch,
    )
    recurring_task_create(
        name="weekly digest",
        handler="tests.handlers.recording.noop",
        period=dt.timedelta(days=7),
        slices=7,
        epoch=epoch,
    )
    member_create_many(external_ids=[f"member-{i}" for i in range(2000)])
    now = timezone.now()
    period = (now - epoch) // task.period
    for index in range(min(24, now.hour + 3)):
        slice_plan(task=task, period=period, slice_index=index, now=epoch)
    login(browser, live_server, "vera")
    browser.get(f"{live_server.url}/recurring/")
    assert "nightly profile sync" in browser.page_source
    shots(browser, "03-recurring-list")
    browser.find_element(By.LINK_TEXT, "nightly profile sync").click()
    browser.find_element(By.ID, "member-input").send_keys("member-42\n")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#member-runs li"))
    runs = browser.find_elements(By.CSS_SELECTOR, "#member-runs li")
    assert len(runs) == 5
    # Members per slice, load per slice and the task's history.
    wait(browser, lambda d: d.execute_script("return Object.keys(Chart.instances).length") == 3)
    strip_width = browser.execute_script("return document.getElementById('strip').width")
    assert strip_width > 0
    slices = browser.find_elements(By.CSS_SELECTOR, "#slices tr")
    assert len(slices) == 25  # header + 24 slices
    assert "●" in browser.find_element(By.ID, "slices").text  # today's slice is marked
    shots(browser, "04-recurring-plan")


def test_operator_cancels_a_job(browser, live_server, operator, shots):
    from selenium.webdriver.common.by import By

    activity()
    job = make_job(
        created_at=timezone.now() - dt.timedelta(minutes=5),
        run_at=timezone.now() + dt.timedelta(hours=3),  # the latest: first in the list
        payload={"order": 42},
        errors=[
            {
                "attempt": 1,
                "at": timezone.now().isoformat(),
                "error": "timeout",
                "kind": "exception",
            }
        ],
    )
    login(browser, live_server, "otto")
    browser.get(f"{live_server.url}/jobs/")
    assert str(job.id) in browser.find_element(By.ID, "jobs").text
    shots(browser, "05-jobs")
    browser.get(f"{live_server.url}/jobs/{job.id}/")
    browser.find_element(By.ID, "cancel").click()  # asks first: nothing changed yet
    wait(browser, lambda d: f"Cancel job {job.id}?" in d.find_element(By.ID, "confirm").text)
    assert Job.objects.get(id=job.id).state == JobState.SCHEDULED
    shots(browser, "06-job-cancel-confirm")
    browser.find_element(By.ID, "confirm-yes").click()
    wait(browser, lambda d: "cancelled." in d.find_element(By.CSS_SELECTOR, ".messages").text)
    assert browser.find_element(By.ID, "job-state").text == "cancelled"
    assert Job.objects.get(id=job.id).state == JobState.CANCELLED
    assert OperatorAction.objects.get().username == "otto"
    shots(browser, "06-job-cancelled")
    browser.get(f"{live_server.url}/audit/")
    assert "otto" in browser.find_element(By.ID, "audit").text
    shots(browser, "07-audit")


def test_viewer_is_refused(browser, live_server, viewer, shots):
    from selenium.webdriver.common.by import By

    job = make_job()
    login(browser, live_server, "vera")
    browser.get(f"{live_server.url}/jobs/{job.id}/")
    button = browser.find_element(By.ID, "cancel")
    assert not button.is_enabled()
    # The server refuses too, not only the page: send the form anyway.
    browser.execute_script("document.getElementById('cancel').disabled = false")
    browser.find_element(By.ID, "cancel").click()
    wait(browser, lambda d: "Not allowed" in d.page_source)
    shots(browser, "08-viewer-refused")
    assert Job.objects.get(id=job.id).state == JobState.SCHEDULED
    # Nothing done; the attempt is recorded.
    assert list(OperatorAction.objects.values_list("action", "username")) == [
        ("denied:cancel", "vera")
    ]


def test_graph_job_page(browser, live_server, viewer, shots):
    """A real graph job (the demo's suggestions job, run in this process), drawn by layers
    from its GraphRun and TaskRuns."""
    from selenium.webdriver.common.by import By

    graph = run_demo_graph(wants=("suggestions",), latency_scale=0.01)
    assert graph.state == GraphState.SUCCEEDED
    login(browser, live_server, "vera")
    browser.get(f"{live_server.url}/jobs/{graph.job_id}/")
    section = browser.find_element(By.ID, "graph")
    assert "Task graph" in section.text and "on failure: abort" in section.text
    layers = section.find_elements(By.CSS_SELECTOR, ".layer")
    assert len(layers) == len(graph.plan["layers"])
    shown = [
        [box.get_attribute("data-task") for box in layer.find_elements(By.CSS_SELECTOR, ".gtask")]
        for layer in layers
    ]
    assert shown == [list(layer) for layer in graph.plan["layers"]]
    states = {
        box.get_attribute("data-state") for box in section.find_elements(By.CSS_SELECTOR, ".gtask")
    }
    assert states == {"succeeded"}
    assert "demo.suggest" in section.text and " ms" in section.text
    shots(browser, "09-graph-job")


def test_graph_drawn_as_a_dag_refreshes_live_and_is_listed(browser, live_server, viewer, shots):
    """The suggestions demo graph half run: the SVG shows finished, running and waiting
    tasks; the rest runs while the page is open and the drawing follows by itself."""
    from selenium.webdriver.common.by import By

    from tasksapp.graphs.models import GraphRun, TaskRun, TaskState
    from tasksapp.graphs.services import graph_job_schedule
    from tests.graphs.conftest import drain, run_next

    graph = graph_job_schedule(
        has={"user_id": 7, "latency_scale": 0, "failure_rate": 0}, wants=["suggestions"]
    )
    for _ in range(5):  # the graph job, then the first tasks
        run_next()
    ready = TaskRun.objects.filter(graph_run=graph, state=TaskState.READY).order_by("id")
    Job.objects.filter(id=ready.first().job_id).update(state=JobState.RUNNING)  # shown running
    login(browser, live_server, "vera")
    browser.get(f"{live_server.url}/jobs/{graph.job_id}/")
    svg = browser.find_element(By.ID, "graph-svg")
    states = {g.get_attribute("data-state") for g in svg.find_elements(By.CSS_SELECTOR, ".gnode")}
    assert {"succeeded", "running", "waiting"} <= states, states
    edges = svg.find_elements(By.CSS_SELECTOR, ".gedge")
    assert len(edges) == sum(len(after) for after in graph.plan["after"].values())
    assert browser.find_element(By.ID, "graph").get_attribute("data-done") == "false"
    shots(browser, "10-graph-dag-running")

    Job.objects.filter(id=ready.first().job_id).update(state=JobState.SCHEDULED)
    drain()
    assert GraphRun.objects.get(id=graph.id).state == GraphState.SUCCEEDED

    def all_done(driver):
        section = driver.find_element(By.ID, "graph")
        nodes = section.find_elements(By.CSS_SELECTOR, "#graph-svg .gnode")
        done = {node.get_attribute("data-state") for node in nodes} == {"succeeded"}
        return done and section.get_attribute("data-done") == "true"

    wait(browser, all_done, timeout=15)  # refreshed in place, no reload
    shots(browser, "11-graph-dag-done")

    browser.get(f"{live_server.url}/graphs/?goal=suggestions")
    rows = browser.find_elements(By.CSS_SELECTOR, "#graphs tr[data-state]")
    assert [row.get_attribute("data-state") for row in rows] == ["succeeded"]
    shots(browser, "12-graph-runs")


def test_queues_page_pause_and_degraded_mode(browser, live_server, operator, shots):
    """An unserved queue stands out; an operator pauses a queue and switches degraded mode
    on from the page, which then says why only critical work runs."""
    from selenium.webdriver.common.by import By

    from tasksapp.engine.queues import queue_configure

    past = timezone.now() - dt.timedelta(seconds=20)
    for queue, count in (("default", 3), ("billing", 12), ("reports", 40)):
        for _ in range(count):
            make_job(queue=queue, run_at=past)
    WorkerProcess.objects.create(
        name="w1", hostname="h1", pid=21, queues=["billing", "default"], running=2
    )
    queue_configure(name="billing", concurrency_limit=20, key_concurrency_limit=1)
    queue_configure(name="partner-api", rate_limit=200, rate_period=1)
    login(browser, live_server, "otto")
    browser.get(f"{live_server.url}/queues/")
    reports = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="reports"]')
    assert "no worker" in reports.text
    billing = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="billing"]')
    billing.find_element(By.LINK_TEXT, "Pause…").click()  # asks first
    wait(browser, lambda d: "Pause the queue billing?" in d.find_element(By.ID, "confirm").text)
    browser.find_element(By.ID, "confirm-yes").click()
    wait(browser, lambda d: "Queue billing paused" in d.page_source)
    browser.find_element(By.ID, "degrade-reason").send_keys("billing database failover")
    browser.find_element(By.ID, "routing-degrade").click()
    banner = wait(browser, lambda d: d.find_elements(By.ID, "degraded-banner"))[0]
    assert "only jobs of priority 9 or above are claimed" in banner.text
    assert "billing database failover" in banner.text
    assert "paused" in browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="billing"]').text
    shots(browser, "10-queues")
    actions = list(OperatorAction.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["queue_pause", "degrade"]
