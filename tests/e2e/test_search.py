"""In headless Chromium: filter the job list by a handler prefix, open a job and read
its payload pretty-printed with a copy button; the header at phone width."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from django.utils import timezone

from tasksapp.engine.models import Job
from tests.e2e.test_browser import browser, login, pytestmark, shots, wait  # noqa: F401
from tests.web.dashboard.fixtures import make_job

PHONE = 390
PAYLOAD = {"fail_rate": 1.0, "notify": True, "note": None, "to": ["ann@example.org"]}


def jobs() -> tuple[Job, Job, Job]:
    now = timezone.now()
    charge = make_job(handler="myjobs.billing.charge", run_at=now, payload=PAYLOAD)
    mail = make_job(handler="myjobs.mail.send", run_at=now, payload={"n": 1})
    other = make_job(handler="otherjobs.sync", run_at=now, payload={"n": 2})
    return charge, mail, other


def test_filter_by_handler_prefix_and_read_a_pretty_payload(browser, live_server, viewer, shots):  # noqa: F811
    from selenium.webdriver.common.by import By

    charge, mail, other = jobs()
    login(browser, live_server, "vera")
    browser.get(f"{live_server.url}/jobs/")
    field = browser.find_element(By.NAME, "handler")
    field.send_keys("myjobs")
    field.submit()
    wait(browser, lambda d: "handler=myjobs" in d.current_url)
    table = browser.find_element(By.ID, "jobs").text
    assert "myjobs.billing.charge" in table and "myjobs.mail.send" in table
    assert "otherjobs.sync" not in table
    shots(browser, "09-jobs-handler-prefix")

    browser.find_element(By.LINK_TEXT, str(charge.id)).click()
    wait(browser, lambda d: d.current_url.endswith(f"/jobs/{charge.id}/"))
    block = browser.find_element(By.CSS_SELECTOR, "#payload pre").text
    assert json.loads(block) == PAYLOAD
    assert '"fail_rate": 1.0' in block and '"notify": true' in block and '"note": null' in block
    assert "{'fail_rate'" not in browser.page_source and "True" not in block
    copy = browser.find_element(By.CSS_SELECTOR, "#payload button[data-copy]")
    copy.click()
    wait(browser, lambda d: copy.text in ("copied", "press Ctrl+C"))
    shots(browser, "10-job-pretty-payload")


def test_the_header_fits_a_phone(browser, live_server, viewer, tmp_path):  # noqa: F811
    login(browser, live_server, "vera")
    browser.get(f"{live_server.url}/jobs/")
    metrics = {"width": PHONE, "height": 844, "deviceScaleFactor": 1, "mobile": True}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        widths = browser.execute_script(
            "return [document.documentElement.scrollWidth,"
            " document.querySelector('.topbar').scrollWidth,"
            " document.querySelector('.topbar .who').getBoundingClientRect().right]"
        )
        shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    page, topbar, who_right = widths
    assert topbar <= PHONE and who_right <= PHONE  # nothing of the header off the screen
    folder = Path(os.environ.get("TEMPO_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "11-phone-header.png").write_bytes(base64.b64decode(shot["data"]))
    assert page <= PHONE + 1, f"the page scrolls sideways: {page} px"
