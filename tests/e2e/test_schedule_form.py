"""In headless Chromium: an operator creates a schedule with the dashboard's form (a
refused cron first, shown at its field), reads its next fire times, then edits it."""

from __future__ import annotations

from tasksapp.schedules.models import Schedule
from tests.e2e.test_browser import browser, login, pytestmark, shots, wait  # noqa: F401
from tests.web.dashboard.fixtures import HANDLER


def fill(driver, values: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    for name, value in values.items():
        field = driver.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_value(value)
        else:
            field.clear()
            field.send_keys(value)


def fire_rows(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, "#next-fires tr")
    return [row.text for row in rows[1:]]


def test_create_a_schedule_in_the_form_see_its_fire_times_and_edit_it(
    browser,  # noqa: F811
    live_server,
    operator,
    shots,  # noqa: F811
):
    from selenium.webdriver.common.by import By

    login(browser, live_server, "otto")
    browser.get(f"{live_server.url}/schedules/")
    browser.find_element(By.ID, "schedule-new").click()
    wait(browser, lambda d: d.current_url.endswith("/schedules/new/"))
    fill(
        browser,
        {
            "name": "nightly-export",
            "handler": HANDLER,
            "cron": "30 2 * *",
            "timezone": "Europe/Berlin",
            "catchup": "all",
            "catchup_window_seconds": "7200",
            "overlap": "skip",
            "payload": '{"format": "csv"}',
            "priority": "7",
            "delivery": "at_least_once",
        },
    )
    browser.find_element(By.ID, "schedule-save").click()
    wait(browser, lambda d: d.find_elements(By.ID, "form-errors"))
    error = browser.find_element(By.CSS_SELECTOR, "label.invalid .field-error").text
    assert error.startswith("cron must have 5 fields") and not Schedule.objects.exists()
    assert browser.find_element(By.NAME, "name").get_attribute("value") == "nightly-export"
    shots(browser, "11-schedule-form-refused")

    fill(browser, {"cron": "30 2 * * *"})
    browser.find_element(By.ID, "schedule-save").click()
    wait(browser, lambda d: d.find_elements(By.ID, "next-fires"))
    schedule = Schedule.objects.get(name="nightly-export")
    assert (schedule.catchup, schedule.overlap, schedule.priority) == ("all", "skip", 7)
    fires = fire_rows(browser)
    assert len(fires) == 10 and all("02:30:00" in row for row in fires)  # Berlin, no change
    assert (
        "At 02:30, every day (Europe/Berlin)" in browser.find_element(By.ID, "schedule-words").text
    )
    shots(browser, "12-schedule-created")

    browser.find_element(By.ID, "schedule-edit").click()
    wait(browser, lambda d: d.current_url.endswith(f"/schedules/{schedule.id}/edit/"))
    assert browser.find_element(By.NAME, "cron").get_attribute("value") == "30 2 * * *"
    fill(browser, {"cron": "0 4 * * 1-5", "jitter_seconds": "30"})
    shots(browser, "13-schedule-form-edit")
    browser.find_element(By.ID, "schedule-save").click()
    wait(browser, lambda d: "saved" in d.find_element(By.CSS_SELECTOR, ".messages").text)
    fires = fire_rows(browser)
    assert len(fires) == 10 and all("04:00:00" in row for row in fires)
    assert not any(row.startswith(("Sat", "Sun")) for row in fires)
    schedule.refresh_from_db()
    assert schedule.cron == "0 4 * * 1-5" and schedule.jitter.total_seconds() == 30
    shots(browser, "14-schedule-edited")
