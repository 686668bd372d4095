"""The docs are reference, not a diary: the benchmarks page stays short (its full outputs
live in bench/results/, earlier ones in git history), no page carries a dated run, and
no comment in the code names an issue number, which means nothing to a reader of the
repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_LIMIT = 15 * 1024
_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
_ISSUE = re.compile(r"#.*\bissue #?\d+", re.IGNORECASE)


def _tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).exists()]


def test_the_benchmarks_page_keeps_to_its_size() -> None:
    size = (ROOT / "docs" / "benchmarks.md").stat().st_size
    assert size <= BENCHMARKS_LIMIT, f"docs/benchmarks.md is {size} bytes: move outputs to bench/results/"


def test_no_page_of_the_docs_carries_a_dated_run() -> None:
    dated = [
        f"{page.relative_to(ROOT)}:{n}"
        for page in _tracked("docs/*.md", "README.md")
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if _DATE.search(line)
    ]
    assert dated == []


def test_no_comment_names_an_issue_number() -> None:
    named = [
        f"{source.relative_to(ROOT)}:{n}"
        for source in _tracked("*.py")
        for n, line in enumerate(source.read_text(errors="replace").splitlines(), 1)
        if _ISSUE.search(line)
    ]
    assert named == []
