"""In headless Chromium: an operator filters the job list to the dead jobs, retries all of
them through the confirmation page (which says how many first and changes nothing), and
lands on the same filtered list with the counts; then ticks two rows and cancels them.
Screenshots as in test_browser.py ($TEMPO_SCREENSHOTS, else the test's folder)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.web.models import OperatorAction
from tests.e2e.test_browser import (  # noqa: F401 - fixtures
    CHROMEDRIVER,
    CHROMIUM,
    browser,
    login,
    shots,
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


def _jobs() -> tuple[list[int], list[int]]:
    now = timezone.now()
    dead = [
        make_job(
            JobState.DEAD,
            run_at=now - dt.timedelta(minutes=10 + i),
            attempts=3,
            max_attempts=3,
            finished_at=now - dt.timedelta(minutes=9 + i),
            last_error="ConnectionError: upstream refused",
        ).id
        for i in range(7)
    ]
    waiting = [make_job(run_at=now + dt.timedelta(hours=1 + i)).id for i in range(4)]
    return dead, waiting


def _states(ids) -> list[str]:
    return list(Job.objects.filter(id__in=ids).order_by("id").values_list("state", flat=True))


def test_operator_bulk_retries_the_dead_jobs(browser, live_server, operator, shots):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    dead, waiting = _jobs()
    login(browser, live_server, "otto")
    browser.get(f"{live_server.url}/jobs/")
    Select(browser.find_element(By.NAME, "state")).select_by_value("dead")
    browser.find_element(By.CSS_SELECTOR, "#job-filters button[type=submit]").click()
    wait(browser, lambda d: "state=dead" in d.current_url)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#jobs input[name=ids]")) == 7
    shots(browser, "20-jobs-dead-filtered")
    browser.find_element(By.ID, "bulk-filter-retry").click()
    question = wait(browser, lambda d: d.find_element(By.ID, "bulk-question"))
    assert question.text == "7 jobs match; retry them?"
    assert "7 of them can be retried" in browser.find_element(By.ID, "bulk-effect").text
    assert _states(dead) == ["dead"] * 7 and not OperatorAction.objects.exists()
    shots(browser, "21-bulk-retry-confirm")
    browser.find_element(By.ID, "confirm-yes").click()
    message = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".messages .success"))
    assert message.text == "Retry: 7 of 7 matching jobs scheduled again, to run now."
    assert "state=dead" in browser.current_url  # the list keeps its filter
    assert Select(browser.find_element(By.NAME, "state")).first_selected_option.text == "dead"
    assert _states(dead) == ["scheduled"] * 7 and _states(waiting) == ["scheduled"] * 4
    (row,) = OperatorAction.objects.all()
    assert (row.action, row.via, row.details["filter"], row.details["changed"]) == (
        "bulk_retry",
        "dashboard",
        {"state": "dead"},
        7,
    )
    shots(browser, "22-bulk-retried")


def test_operator_cancels_two_ticked_rows(browser, live_server, operator, shots):  # noqa: F811
    from selenium.webdriver.common.by import By

    _, waiting = _jobs()
    login(browser, live_server, "otto")
    browser.get(f"{live_server.url}/jobs/?state=scheduled")
    boxes = browser.find_elements(By.CSS_SELECTOR, "#jobs input[name=ids]")
    browser.find_element(By.ID, "tick-all").click()  # the header's box ticks the page
    assert all(box.is_selected() for box in boxes) and len(boxes) == 4
    browser.find_element(By.ID, "tick-all").click()
    assert not any(box.is_selected() for box in boxes)
    for job_id in waiting[:2]:
        browser.find_element(By.CSS_SELECTOR, f'#jobs input[name=ids][value="{job_id}"]').click()
    browser.find_element(By.ID, "bulk-selected-cancel").click()
    question = wait(browser, lambda d: d.find_element(By.ID, "bulk-question"))
    assert question.text == "2 ticked jobs found; cancel them?"
    shots(browser, "23-bulk-cancel-ticked-confirm")
    browser.find_element(By.ID, "confirm-yes").click()
    message = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".messages .success"))
    assert message.text.startswith("Cancel: 2 of 2 ticked jobs cancelled")
    assert _states(waiting) == ["cancelled", "cancelled", "scheduled", "scheduled"]


def test_a_long_bulk_action_goes_on_where_it_stopped(
    browser,  # noqa: F811
    live_server,
    operator,
    shots,  # noqa: F811
    monkeypatch,
):
    from selenium.webdriver.common.by import By

    from tasksapp.engine.services import bulk as engine_bulk
    from tasksapp.web.dashboard import bulk

    monkeypatch.setattr(engine_bulk, "CHUNK_JOBS", 3)
    monkeypatch.setattr(bulk, "BULK_SECONDS", 1e-9)  # each request: one chunk of 3
    dead, _ = _jobs()
    login(browser, live_server, "otto")
    browser.get(f"{live_server.url}/jobs/bulk/retry/?scope=filter&state=dead")
    browser.find_element(By.ID, "confirm-yes").click()
    progress = wait(browser, lambda d: d.find_element(By.ID, "bulk-progress"))
    assert progress.text.startswith("So far 3 of 3 matching jobs scheduled again")
    assert _states(dead) == ["scheduled"] * 3 + ["dead"] * 4
    shots(browser, "26-bulk-retry-goes-on")
    browser.find_element(By.ID, "confirm-yes").click()  # Go on
    wait(browser, lambda d: "So far 6 of 6" in d.find_element(By.ID, "bulk-progress").text)
    browser.find_element(By.ID, "confirm-yes").click()
    message = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".messages .success"))
    assert message.text == "Retry: 7 of 7 matching jobs scheduled again, to run now."
    assert _states(dead) == ["scheduled"] * 7
    assert OperatorAction.objects.filter(action="bulk_retry").count() == 3  # one a request
