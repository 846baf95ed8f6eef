"""Every file, module and command the documentation names exists.

README.md and docs/**/*.md name repository paths (`tasksapp/engine/services.py`,
`bench/burst`, `tests/processes/`), link other documents, run benches
(`python -m bench.burst`) and management commands (`manage.py retention_run`). A rename
that forgets a document leaves a newcomer looking for a file that is not there; these
tests name each such reference with its document and line.

What is not a reference to this repository is left alone: URLs, globs and placeholders
(`bench/results/practice-*.json`, `tasksapp/engine/**`), URL paths (`/api/queues/`) and
paths of a user's own project (`myapp/tasks.py`). Checked are paths under this
repository's top-level directories, or under tasksapp's packages written without the
`tasksapp/` prefix (`engine/store/postgres_sql.py`), anywhere in the text; and, in code
spans, paths relative to some folder (`store/pg_session.py`) whose first folder is one of
the repository's: they must be the end of a path that exists.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "tasksapp"

ERR_MISSING = "{doc}:{line}: {kind} `{name}` does not exist"

URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s)>`\"']*")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MODULE = re.compile(r"(?<![\w.])-m\s+((?:bench|tasksapp)(?:\.\w+)*)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
RELATIVE = re.compile(r"[\w.-]+(?:/[\w.-]+)+/?")
SKIPPED_DIRS = {".git", ".venv", "__pycache__", "node_modules", ".hypothesis", ".pytest_cache"}
HERE = re.compile(r"(?<![\w.])\./")
COMMAND = re.compile(r"\bmanage\.py\s+([a-z][a-z0-9_]*)\b")
# A character after a path that makes it a pattern or a placeholder, not a file.
PATTERN_CHARS = set("*?[{<…$%")


@dataclass(frozen=True)
class Reference:
    kind: str  # "path", "relative path", "link", "module" or "command"
    name: str
    line: int


def _top_level_dirs() -> set[str]:
    return {
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and not p.name.endswith(".egg-info")
    }


def _app_packages() -> set[str]:
    return {p.name for p in APP.iterdir() if (p / "__init__.py").exists()}


@functools.cache
def _repository_tails() -> tuple[set[str], set[str]]:
    """Every path of the repository and each of its tails (`store/rows.py` of
    `tasksapp/engine/store/rows.py`); and the names of its folders."""
    tails: set[str] = set()
    folders: set[str] = set()
    for top, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        folders.update(dirnames)
        base = Path(top).relative_to(ROOT).parts
        for name in dirnames + filenames:
            parts = (*base, name)
            tails.update("/".join(parts[i:]) for i in range(len(parts)))
    return tails, folders


def _path_pattern(roots: set[str]) -> re.Pattern[str]:
    names = "|".join(sorted(map(re.escape, roots), key=len, reverse=True))
    # Not inside a longer word, path, URL, module or option: `bench/x`, not `my-bench/x`.
    return re.compile(rf"(?<![\w./:@~$\\-])((?:{names})/[\w./-]*)")


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group(0))


def references(
    text: str, *, roots: set[str], folders: frozenset[str] = frozenset()
) -> list[Reference]:
    """The repository paths, document links, bench modules and management commands that
    `text` (Markdown) names, each with its line; in code spans also the relative paths
    whose first folder is one of `folders` (but not a root: those are paths already)."""
    text = URL.sub(_blank, text)  # same length: line numbers stay right
    text = HERE.sub(_blank, text)  # `./bin/run` names bin/run
    found: list[Reference] = []
    for match in LINK.finditer(text):
        target = match.group(1).split("#", 1)[0]
        if target and not target.startswith("mailto:"):
            found.append(Reference("link", target, _line(text, match.start(1))))
    for match in _path_pattern(roots).finditer(text):
        following = text[match.end() : match.end() + 1]
        if following in PATTERN_CHARS:
            continue
        name = match.group(1).rstrip(".-")
        found.append(Reference("path", name, _line(text, match.start())))
    for match in CODE_SPAN.finditer(text):
        span = match.group(1).strip()
        span = span[2:] if span.startswith("./") else span
        first = span.split("/", 1)[0]
        if RELATIVE.fullmatch(span) and first in folders and first not in roots:
            found.append(Reference("relative path", span.rstrip("/"), _line(text, match.start())))
    for match in MODULE.finditer(text):
        found.append(Reference("module", match.group(1), _line(text, match.start(1))))
    for match in COMMAND.finditer(text):
        found.append(Reference("command", match.group(1), _line(text, match.start(1))))
    return found


def _path_exists(name: str, *, top: set[str]) -> bool:
    first = name.split("/", 1)[0]
    candidates = [ROOT / name] if first in top else []
    candidates.append(APP / name)  # `engine/services.py` stands for tasksapp/engine/...
    return any(c.exists() for c in candidates)


def _module_exists(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    package = (base / "__init__.py").exists() or (base / "__main__.py").exists()
    return package or base.with_suffix(".py").exists()


def missing(doc: Path, text: str) -> list[str]:
    """Messages for the references of `doc` that name nothing in the repository."""
    top, commands = _top_level_dirs(), get_commands()
    tails, folders = _repository_tails()
    problems = []
    for ref in references(text, roots=top | _app_packages(), folders=frozenset(folders)):
        if ref.kind == "link":
            ok = (doc.parent / ref.name).exists()
        elif ref.kind == "path":
            ok = _path_exists(ref.name, top=top)
        elif ref.kind == "relative path":
            ok = ref.name in tails
        elif ref.kind == "module":
            ok = _module_exists(ref.name)
        else:
            ok = ref.name in commands
        if not ok:
            where = doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc
            problems.append(
                ERR_MISSING.format(doc=where, line=ref.line, kind=ref.kind, name=ref.name)
            )
    return problems


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_reference_in_the_docs_exists(doc: Path) -> None:
    problems = missing(doc, doc.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


# --- the extraction itself ---------------------------------------------------------------

ROOTS = {"tasksapp", "bench", "tests", "docs", "bin", "engine"}


def _names(text: str) -> list[tuple[str, str]]:
    return [(r.kind, r.name) for r in references(text, roots=ROOTS)]


def test_paths_are_found_in_code_spans_prose_and_code_blocks_with_their_lines() -> None:
    text = (
        "See `tasksapp/engine/services.py` and bench/burst/.\n"
        "```\n.venv/bin/python -m bench.burst --sizes 100\n```\n"
        "`./bin/test` runs tests/engine/test_store.py::test_claim"
        " or tests/e2e/test_browser.py:12.\n"
    )
    refs = references(text, roots=ROOTS)
    assert [(r.kind, r.name, r.line) for r in refs] == [
        ("path", "tasksapp/engine/services.py", 1),
        ("path", "bench/burst/", 1),
        ("path", "bin/test", 5),
        ("path", "tests/engine/test_store.py", 5),
        ("path", "tests/e2e/test_browser.py", 5),
        ("module", "bench.burst", 3),
    ]


def test_urls_globs_placeholders_and_a_users_own_paths_are_not_references() -> None:
    text = (
        "https://github.com/org/repo/blob/main/tasksapp/engine/x.py and "
        "`bench/results/practice-*.json`, `tasksapp/engine/**`, `docs/images/<name>.png`, "
        "`myapp/tasks.py`, `src/bench/x.py`, `my-tests/a.py`, $HOME/bin/x"
    )
    assert _names(text) == []


def test_links_are_read_without_their_anchor_and_urls_are_not_links() -> None:
    text = (
        "[scaling](SCALING.md#one-job), [up](../README.md), [web](https://x.org/a.md), [top](#top)"
    )
    assert _names(text) == [("link", "SCALING.md"), ("link", "../README.md")]


def test_a_sentence_end_is_not_part_of_a_path() -> None:
    assert _names("as in docs/ROUTING.md. Then") == [("path", "docs/ROUTING.md")]


def test_relative_paths_are_read_from_code_spans_whose_first_folder_exists() -> None:
    text = (
        "`store/rows.py`, `./services/graphs/sql.py`, store/prose.py, `myapp/tasks.py`,"
        " `/api/queues/`, `engine/wheel.py`, `store/*.py`"
    )
    refs = references(text, roots=ROOTS, folders=frozenset({"store", "services", "engine"}))
    assert [(r.kind, r.name) for r in refs] == [
        ("path", "engine/wheel.py"),
        ("relative path", "store/rows.py"),
        ("relative path", "services/graphs/sql.py"),
    ]


def test_commands_are_found_after_manage_py() -> None:
    assert _names("`./manage.py retention_run --dry-run`") == [("command", "retention_run")]


def test_a_missing_path_link_module_and_command_are_each_reported() -> None:
    doc = ROOT / "docs" / "EXAMPLE.md"
    text = (
        "`tests/test_docs.py` exists, `tasksapp/engine/nothing_here.py` does not;\n"
        "[ok](ARCHITECTURE.md) [gone](GONE.md)\n"
        "`python -m bench.burst` `python -m bench.no_such_bench`\n"
        "`manage.py retention_run` `manage.py no_such_command` `engine/nowhere.py`\n"
        "`store/rows.py` `services/graphs/sql.py`\n"
    )
    assert missing(doc, text) == [
        "docs/EXAMPLE.md:2: link `GONE.md` does not exist",
        "docs/EXAMPLE.md:1: path `tasksapp/engine/nothing_here.py` does not exist",
        "docs/EXAMPLE.md:4: path `engine/nowhere.py` does not exist",
        "docs/EXAMPLE.md:5: relative path `services/graphs/sql.py` does not exist",
        "docs/EXAMPLE.md:3: module `bench.no_such_bench` does not exist",
        "docs/EXAMPLE.md:4: command `no_such_command` does not exist",
    ]
