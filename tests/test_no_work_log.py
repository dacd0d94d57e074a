"""Nothing in the repository reads as a work log: no text speaks of sessions of work or of issue numbers. The history
is git's; docs say how things work and what holds now."""

from __future__ import annotations

import re

from conftest import REPO, tracked

# "Session 14: ...", "in this session", "issue 17", "issue #17", "issues 41-47".
WORK_LOG = re.compile(r"\bsessions? \d+(?![.\d])|\b(?:this|next|last|previous) session\b|\bissues? #?\d+", re.I)
TEXT = (".md", ".py", ".yml", ".yaml", ".j2", ".sh", ".cfg", ".toml", ".txt", ".lua", ".json")


def tracked_text() -> list[str]:
    """Return the repository's tracked text files, the tests' captured data left out."""
    return [f for f in tracked() if f.endswith(TEXT) and not f.startswith("tests/data/")]


def work_log_lines(text: str) -> list[str]:
    """Return the lines of a text that speak of sessions of work or issue numbers."""
    return [line.strip() for line in text.splitlines() if WORK_LOG.search(line)]


def test_the_pattern_finds_a_work_log() -> None:
    """The check would see the ways a work log was written."""
    text = "## Session 14: the gateway\nFixed in this session.\nSee issue #17.\nCloses issues 41.\nA TLS session 0.5 ms"
    assert len(work_log_lines(text)) == 4


def test_no_tracked_file_is_a_work_log() -> None:
    """No line of a tracked text file names a session of work or an issue number."""
    found = {path: lines for path in tracked_text() if path != "tests/test_no_work_log.py"
             if (lines := work_log_lines((REPO / path).read_text(errors="replace")))}
    assert not found, found
