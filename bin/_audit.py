"""bin/test's dependency audit: pip-audit over both locks, against PyPI's advisories.

Any known vulnerability fails the run (exit 1). A package the advisory service could not
look up is not audited, and the output says so; it never reads "No known vulnerabilities
found" for packages nobody looked up:

- every package looked up, none vulnerable: "pip-audit: no known vulnerabilities in N
  pinned packages";
- some could not be: "... in N of M pinned packages; K could not be looked up (not
  audited)";
- none could be, or the service cannot be reached at all: "pip-audit: not audited
  (advisory service unreachable)". pip-audit keeps no advisory database offline, so
  without the service there is nothing to audit against.

TEMPO_AUDIT_STRICT=1 fails the run whenever a package was not audited. TEMPO_PIP_AUDIT
names the pip-audit to run (default: the project's .venv).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_AUDITED = "pip-audit: not audited (advisory service unreachable)"
PARTLY_AUDITED = (
    "pip-audit: no known vulnerabilities in {audited} of {total} pinned packages; {skipped}"
    " could not be looked up (not audited)"
)
ALL_AUDITED = "pip-audit: no known vulnerabilities in {audited} pinned packages"
VULNERABLE = "pip-audit: {count} known vulnerabilities in {packages} pinned packages"
# What requests/urllib3 say when the advisory service cannot be reached.
NETWORK_ERRORS = (
    "ConnectionError",
    "NewConnectionError",
    "NameResolutionError",
    "Max retries exceeded",
    "ProxyError",
    "ConnectTimeout",
    "ReadTimeout",
    "Temporary failure in name resolution",
    "Network is unreachable",
)


def run_pip_audit(report: Path) -> subprocess.CompletedProcess:
    command = os.environ.get("TEMPO_PIP_AUDIT") or str(ROOT / ".venv" / "bin" / "pip-audit")
    arguments = [
        *("--requirement", "requirements.lock"),
        *("--requirement", "requirements-dev.lock"),
        *("--require-hashes", "--disable-pip"),
    ]
    arguments += ["--progress-spinner", "off", "--format", "json", "--output", str(report)]
    return subprocess.run([command, *arguments], cwd=ROOT, capture_output=True, text=True)


def read_report(report: Path) -> list[dict] | None:
    """The report's dependencies, or None when pip-audit wrote none it could finish."""
    try:
        return list(json.loads(report.read_text())["dependencies"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def verdict(dependencies: list[dict], *, strict: bool) -> tuple[int, str]:
    """(exit status, what to print) for a finished report."""
    vulnerable = [dep for dep in dependencies if dep.get("vulns")]
    if vulnerable:
        lines = [
            f"{dep['name']} {dep.get('version', '?')}: {vuln['id']} (fixed in "
            f"{', '.join(vuln.get('fix_versions') or []) or 'no release yet'})"
            for dep in vulnerable
            for vuln in dep["vulns"]
        ]
        count = sum(len(dep["vulns"]) for dep in vulnerable)
        lines.append(VULNERABLE.format(count=count, packages=len(vulnerable)))
        return 1, "\n".join(lines)
    skipped = sum(1 for dep in dependencies if "skip_reason" in dep)
    audited = len(dependencies) - skipped
    if not audited:
        return int(strict), NOT_AUDITED
    if skipped:
        total = len(dependencies)
        return int(strict), PARTLY_AUDITED.format(audited=audited, total=total, skipped=skipped)
    return 0, ALL_AUDITED.format(audited=audited)


def main() -> int:
    strict = os.environ.get("TEMPO_AUDIT_STRICT", "") not in ("", "0")
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "audit.json"
        done = run_pip_audit(report)
        dependencies = read_report(report)
    said = done.stdout + done.stderr
    finished = dependencies is not None and (
        done.returncode == 0 or any(dep.get("vulns") for dep in dependencies)
    )
    if finished:
        status, message = verdict(dependencies, strict=strict)
    elif any(error in said for error in NETWORK_ERRORS):
        status, message = int(strict), NOT_AUDITED
    else:  # pip-audit failed otherwise (a hash mismatch, say): show why
        status, message = 1, said.rstrip() or f"pip-audit failed (exit {done.returncode})"
    print(message, file=sys.stderr if status else sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main())
