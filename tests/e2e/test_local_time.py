"""In headless Chromium started with TZ=America/New_York: every UTC timestamp of a page
gets the reader's local time beside it (static/dashboard/localtime.js, a script the
Content-Security-Policy allows: no inline code), and the relative times stay current.
Screenshots as in test_browser.py ($TEMPO_SCREENSHOTS, else the test's folder)."""

from __future__ import annotations

import datetime as dt
import os
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from tasksapp.engine.models import JobState
from tests.e2e.test_browser import (
    CHROMEDRIVER,
    CHROMIUM,
    HEIGHT,
    WIDTH,
    login,
    shots,  # noqa: F401 - fixture
    wait,
)
from tests.web.dashboard.fixtures import make_job

pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="headless Chromium is missing: apt-get install chromium chromium-driver",
    ),
    pytest.mark.django_db(transaction=True),
]
ZONE = "America/New_York"


@pytest.fixture(scope="module")
def browser():
    """Chromium in New York: its TZ environment variable, as on an operator's machine."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument(f"--window-size={WIDTH},{HEIGHT}")
    service = Service(str(CHROMEDRIVER), env={**os.environ, "TZ": ZONE})
    driver = webdriver.Chrome(service=service, options=options)
    yield driver
    driver.quit()


def in_new_york(moment: dt.datetime) -> str:
    local = moment.astimezone(ZoneInfo(ZONE))
    return local.strftime("%H:%M:%S ") + local.tzname()


def test_local_time_beside_each_utc_time(browser, live_server, viewer, shots):  # noqa: F811
    from selenium.webdriver.common.by import By

    now = timezone.now().replace(microsecond=0)
    # 02:30 UTC is the evening before in New York: the local line names its date.
    late = now.replace(hour=2, minute=30, second=0) - dt.timedelta(days=1)
    evening = make_job(JobState.SUCCEEDED, run_at=late, started_at=late, finished_at=late)
    recent = make_job(run_at=now + dt.timedelta(minutes=5))
    login(browser, live_server, "vera")
    assert browser.execute_script("return Intl.DateTimeFormat().resolvedOptions().timeZone") == ZONE
    browser.get(f"{live_server.url}/jobs/")

    def local_of(job_id: int, column: int = 6) -> str:
        cell = f"#jobs tr:has(a[href='/jobs/{job_id}/']) td:nth-child({column})"
        return wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, f"{cell} .local-time")).text

    utc_day = late.strftime("%Y-%m-%d")
    local_day = late.astimezone(ZoneInfo(ZONE)).strftime("%Y-%m-%d")
    assert local_day != utc_day
    assert local_of(evening.id) == f"{local_day} {in_new_york(late)}"
    assert local_of(recent.id).endswith(in_new_york(recent.run_at))
    assert in_new_york(late).endswith(("EST", "EDT"))
    # The started column (a bare time of day) gets it too; the UTC text stays as it was.
    assert local_of(evening.id, column=7) == f"{local_day} {in_new_york(late)}"
    cell = browser.find_element(By.CSS_SELECTOR, f"#jobs tr:has(a[href='/jobs/{evening.id}/'])")
    assert late.strftime("%Y-%m-%d %H:%M:%S UTC") in cell.text
    time = cell.find_element(By.CSS_SELECTOR, "time")
    assert f"your time ({ZONE}): {local_day} {in_new_york(late)}" in time.get_attribute("title")
    shots(browser, "24-jobs-local-time")
    # The relative part is kept current by the script (every 15 s).
    stale = "document.querySelectorAll('time .rel').forEach(s => { s.textContent = '?'; })"
    browser.execute_script(stale)
    wait(
        browser,
        lambda d: all(
            s.text.startswith("· ") for s in d.find_elements(By.CSS_SELECTOR, "time .rel")
        ),
        timeout=25,
    )
    # A job's page: its timeline's times too.
    browser.get(f"{live_server.url}/jobs/{evening.id}/")
    lines = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".local-time"))
    assert any(line.text.endswith(in_new_york(late)) for line in lines)
    shots(browser, "25-job-local-time")
