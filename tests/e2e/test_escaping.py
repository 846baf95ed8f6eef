"""Stored text is shown as text, in headless Chromium: jobs, a recurring task, members,
audit entries and process names holding markup (`<script>`, an attribute breaking out
into `onerror`, `javascript:` links) and text of other scripts (emoji, right-to-left,
combining marks) in every free-text place. Every dashboard page and admin page that
shows them runs no script of theirs (`window.__xss` stays undefined), grows no element
from them, and shows the text literally.

One page is saved as a screenshot: into $TEMPO_SCREENSHOTS if set, else the test's
temporary folder.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from tasksapp.engine.models import Dispatcher, JobState, WorkerProcess
from tasksapp.recurring.services import member_create, recurring_task_create
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import member_deactivate_audited
from tests.e2e import test_browser as browser_tests
from tests.web.dashboard.fixtures import HANDLER, make_job

# The headless browser and screenshots of the browser tests.
browser = browser_tests.browser
shots = browser_tests.shots
login = browser_tests.login

pytestmark = [
    pytest.mark.skipif(
        not (browser_tests.CHROMIUM.exists() and browser_tests.CHROMEDRIVER.exists()),
        reason="headless Chromium is missing: apt-get install chromium chromium-driver",
    ),
    pytest.mark.django_db(transaction=True),
]

SCRIPT = "<script>window.__xss=1</script>"
ATTRIBUTE = '"><img src=x onerror="window.__xss=1">'
LINK = "javascript:window.__xss=1"
SVG = "<svg onload=window.__xss=1>"
EMOJI = "🚀 émoji 👩‍👩‍👧"
RTL = "שלום עולם مرحبا"
COMBINING = "Zalgo: Z\u0351\u0314a\u0310l\u0312g\u0300o\u0301 e\u0301"
MARKUP = (SCRIPT, ATTRIBUTE, LINK, SVG)
TEXTS = (EMOJI, RTL, COMBINING)

# What a page may hold that came from our data: none of it may exist as an element.
GROWN = """
return {
  xss: typeof window.__xss,
  imgs: document.querySelectorAll('img[src="x"], img[onerror]').length,
  svgs: document.querySelectorAll('svg[onload]').length,
  links: [...document.querySelectorAll('a[href], iframe[src], form[action]')]
    .filter(e => (e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action'))
      .trim().toLowerCase().startsWith('javascript:')).length,
  scripts: [...document.scripts]
    .filter(s => s.type !== 'application/json' && s.textContent.includes('__xss')).length,
  text: document.body.innerText + '\\n' +
    [...document.querySelectorAll('input, textarea')].map(e => e.value).join('\\n'),
};
"""


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


@pytest.fixture
def hostile():
    """Every free-text place filled with markup and other scripts."""
    root = User.objects.create_superuser("root", password="root-password-1")
    now = timezone.now()
    task = recurring_task_create(
        name=ATTRIBUTE,
        handler=HANDLER,
        period=dt.timedelta(days=1),
        slices=4,
        epoch=now.replace(hour=0, minute=0, second=0, microsecond=0),
        payload={"html": SCRIPT, "text": EMOJI},
    )
    other = recurring_task_create(
        name=f"{RTL} {EMOJI}",
        handler=HANDLER,
        period=dt.timedelta(hours=6),
        slices=2,
        epoch=now.replace(hour=0, minute=0, second=0, microsecond=0),
    )
    member = member_create(external_id=SCRIPT)
    member_create(external_id=COMBINING)
    member_deactivate_audited(user=root, member=member, via=OperatorAction.Via.DASHBOARD)
    OperatorAction.objects.create(
        user=root,
        username=root.username,
        via=OperatorAction.Via.API,
        action="note",
        target_type=SVG[:40],
        target_id=ATTRIBUTE,
        details={"why": SCRIPT, "link": LINK, "text": RTL},
    )
    everything = {"script": SCRIPT, "attr": ATTRIBUTE, "link": LINK, "svg": SVG}
    everything.update({"emoji": EMOJI, "rtl": RTL, "combining": COMBINING})
    job = make_job(
        state=JobState.DEAD,
        run_at=now + dt.timedelta(hours=2),  # the latest: first in the list
        idempotency_key=ATTRIBUTE,
        payload=everything,
        result=everything,
        attempts=1,
        max_attempts=1,
        claimed_by=SCRIPT,
        claimed_at=now,
        started_at=now,
        finished_at=now,
        last_error=f"ValueError: {SCRIPT} {RTL}",
        errors=[
            {
                "attempt": 1,
                "at": now.isoformat(),
                "kind": SVG,
                "error": f"ValueError: {ATTRIBUTE} {LINK} {EMOJI} {COMBINING}",
            }
        ],
    )
    Dispatcher.objects.create(name=ATTRIBUTE, hostname=SCRIPT, pid=1, partitions=[0, 1])
    WorkerProcess.objects.create(name=SVG, hostname=RTL, pid=2)
    return {"root": root, "task": task, "other": other, "member": member, "job": job}


def _page_is_safe(browser, url: str, expected: tuple[str, ...]) -> None:
    browser.get(url)
    found = browser.execute_script(GROWN)
    grown = {key: found[key] for key in ("imgs", "svgs", "links", "scripts")}
    assert found["xss"] == "undefined", url
    assert grown == {"imgs": 0, "svgs": 0, "links": 0, "scripts": 0}, url
    text = _nfc(found["text"])
    missing = [value for value in expected if _nfc(value) not in text]
    assert not missing, (url, missing)


def test_stored_markup_and_other_scripts_are_shown_as_text(browser, live_server, hostile, shots):
    base = live_server.url
    job, task, other = hostile["job"], hostile["task"], hostile["other"]
    login(browser, live_server, "root")
    pages = [
        (f"{base}/", (ATTRIBUTE, SCRIPT, SVG, RTL)),  # processes: names and hosts
        (f"{base}/jobs/", (str(job.id),)),
        (f"{base}/jobs/?handler={quote(SCRIPT)}&member={quote(ATTRIBUTE)}", (SCRIPT, ATTRIBUTE)),
        (f"{base}/jobs/{job.id}/", (*MARKUP, *TEXTS)),
        (f"{base}/recurring/", (ATTRIBUTE, RTL, EMOJI)),
        (f"{base}/recurring/{task.id}/?member={quote(SCRIPT)}", (ATTRIBUTE, SCRIPT)),
        (f"{base}/recurring/{other.id}/?member={quote(COMBINING)}", (RTL, EMOJI, COMBINING)),
        (f"{base}/recurring/{task.id}/?member={quote(ATTRIBUTE)}", (ATTRIBUTE,)),
        (f"{base}/audit/", (SCRIPT, ATTRIBUTE, LINK, RTL)),
        (f"{base}/admin/tasksapp/job/", (HANDLER,)),
        (f"{base}/admin/tasksapp/job/{job.id}/change/", (ATTRIBUTE, SCRIPT, LINK, EMOJI, RTL)),
        (f"{base}/admin/tasksapp/recurringtask/", (ATTRIBUTE, RTL)),
        (f"{base}/admin/tasksapp/recurringtask/{task.id}/change/", (ATTRIBUTE, SCRIPT, EMOJI)),
        (f"{base}/admin/tasksapp/member/", (SCRIPT, COMBINING)),
        (f"{base}/admin/tasksapp/member/{hostile['member'].id}/change/", (SCRIPT,)),
        (f"{base}/admin/tasksapp/operatoraction/", (ATTRIBUTE,)),
    ]
    for url, expected in pages:
        _page_is_safe(browser, url, expected)
    browser.get(f"{base}/jobs/{job.id}/")
    path = shots(browser, "escaping-job-detail")
    assert path.stat().st_size > 10_000
