"""bin/test's dependency audit (bin/_audit.py) never claims an audit nobody made: it runs
a stand-in pip-audit that answers as the real one does in each case (service reached,
packages not found, service unreachable, a vulnerability, another failure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOT_AUDITED = "pip-audit: not audited (advisory service unreachable)"
UNREACHABLE = (
    "Traceback (most recent call last):\n  ...\nrequests.exceptions.ConnectionError: "
    "HTTPSConnectionPool(host='pypi.org', port=443): Max retries exceeded with url: "
    "/pypi/amqp/5.4.2/json (Caused by NameResolutionError(...))\n"
)
FAKE = """import json, os, sys
report = sys.argv[sys.argv.index("--output") + 1]
if os.environ["FAKE_REPORT"]:
    with open(report, "w") as file:
        file.write(os.environ["FAKE_REPORT"])
sys.stderr.write(os.environ["FAKE_SAYS"])
sys.exit(int(os.environ["FAKE_CODE"]))
"""


def clean(name: str) -> dict:
    return {"name": name, "version": "1.0", "vulns": []}


def not_found(name: str) -> dict:
    reason = f"Dependency not found on PyPI and could not be audited: {name} (1.0)"
    return {"name": name, "skip_reason": reason}


def vulnerable(name: str) -> dict:
    vuln = {"id": "PYSEC-2026-1", "fix_versions": ["1.1"], "aliases": [], "description": ""}
    return {"name": name, "version": "1.0", "vulns": [vuln]}


def audit(tmp_path, *, report, says="", code=0, strict=False) -> subprocess.CompletedProcess:
    fake = tmp_path / "pip-audit"
    fake.write_text(f"#!{sys.executable}\n{FAKE}")
    fake.chmod(0o755)
    env = {**os.environ, "TEMPO_PIP_AUDIT": str(fake), "FAKE_SAYS": says, "FAKE_CODE": str(code)}
    env["FAKE_REPORT"] = "" if report is None else json.dumps({"dependencies": report})
    env.pop("TEMPO_AUDIT_STRICT", None)
    if strict:
        env["TEMPO_AUDIT_STRICT"] = "1"
    script = ROOT / "bin" / "_audit.py"
    return subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )


def said(done: subprocess.CompletedProcess) -> str:
    return (done.stdout + done.stderr).strip()


@pytest.mark.parametrize("strict", [False, True])
def test_no_package_looked_up_is_not_audited(tmp_path, strict):
    """The advisory service answered "not found" for every package (as here)."""
    found = "No known vulnerabilities found\n"
    done = audit(
        tmp_path, report=[not_found("amqp"), not_found("django")], says=found, strict=strict
    )
    assert said(done) == NOT_AUDITED
    assert done.returncode == (1 if strict else 0)


@pytest.mark.parametrize("strict", [False, True])
def test_an_unreachable_service_is_not_audited(tmp_path, strict):
    done = audit(tmp_path, report=None, says=UNREACHABLE, code=1, strict=strict)
    assert said(done) == NOT_AUDITED
    assert done.returncode == (1 if strict else 0)


def test_some_packages_not_looked_up_are_counted(tmp_path):
    done = audit(tmp_path, report=[clean("amqp"), clean("celery"), not_found("django")])
    expected = (
        "pip-audit: no known vulnerabilities in 2 of 3 pinned packages; 1 could not be"
        " looked up (not audited)"
    )
    assert (said(done), done.returncode) == (expected, 0)
    strict = audit(tmp_path, report=[clean("amqp"), not_found("django")], strict=True)
    assert strict.returncode == 1


def test_every_package_looked_up_and_clean(tmp_path):
    done = audit(tmp_path, report=[clean("amqp"), clean("django")], strict=True)
    assert (said(done), done.returncode) == (
        "pip-audit: no known vulnerabilities in 2 pinned packages",
        0,
    )


def test_a_known_vulnerability_fails(tmp_path):
    done = audit(tmp_path, report=[clean("amqp"), vulnerable("django")], code=1)
    assert done.returncode == 1
    assert said(done).splitlines() == [
        "django 1.0: PYSEC-2026-1 (fixed in 1.1)",
        "pip-audit: 1 known vulnerabilities in 1 pinned packages",
    ]


def test_another_failure_fails_and_shows_why(tmp_path):
    says = "ERROR:pip_audit._cli:hash mismatch for django==1.0\n"
    done = audit(tmp_path, report=None, says=says, code=1)
    assert (said(done), done.returncode) == (says.strip(), 1)


def test_bin_test_runs_the_audit():
    assert ".venv/bin/python bin/_audit.py\n" in (ROOT / "bin" / "test").read_text()
