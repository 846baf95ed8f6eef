"""In headless Chromium: a task that follows Europe/Berlin's calendar days on its list
row and on the plan of its 23-hour day (the skipped hour's empty slice, local times of a
member's next runs). Screenshots as in tests/e2e/test_browser.py."""

from __future__ import annotations

import datetime as dt

import pytest

from tasksapp.recurring import localtime
from tasksapp.recurring.services import member_create_many, plan_due_slices, recurring_task_create
from tests.e2e.test_browser import CHROMEDRIVER, CHROMIUM, browser, login, shots, wait  # noqa: F401
from tests.web.dashboard.fixtures import HANDLER, roles, viewer  # noqa: F401

pytestmark = [
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="headless Chromium is missing: apt-get install chromium chromium-driver",
    ),
    pytest.mark.django_db(transaction=True),
]

BERLIN = "Europe/Berlin"


def test_the_plan_of_a_23_hour_day(browser, live_server, viewer, shots):  # noqa: F811
    from selenium.webdriver.common.by import By

    first = dt.date(2026, 3, 28)
    task = recurring_task_create(
        name="berlin morning sync",
        handler=HANDLER,
        period=dt.timedelta(days=1),
        slices=24,
        epoch=localtime.local_midnight(first, BERLIN),
        timezone=BERLIN,
    )
    recurring_task_create(name="utc digest", handler=HANDLER, period=dt.timedelta(hours=6))
    member_create_many(external_ids=[f"member-{i}" for i in range(500)])
    plan_due_slices(now=task.epoch + dt.timedelta(hours=20))  # the 29th is planned
    login(browser, live_server, "vera")
    browser.get(f"{live_server.url}/recurring/")
    row = browser.find_element(By.XPATH, "//tr[td/a[text()='berlin morning sync']]")
    assert BERLIN in row.text
    shots(browser, "recurring-timezone-list")
    browser.get(f"{live_server.url}/recurring/{task.pk}/?period=1")
    browser.find_element(By.ID, "member-input").send_keys("member-42\n")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#member-runs li"))
    assert "23 hours" in browser.find_element(By.ID, "period-local").text
    slices = browser.find_element(By.ID, "slices").text
    assert "03:00 – 03:00 (skipped: runs at the jump)" in slices
    runs = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#member-runs li")]
    assert len(runs) == 5 and all(BERLIN in run for run in runs)
    shots(browser, "recurring-timezone-plan")
