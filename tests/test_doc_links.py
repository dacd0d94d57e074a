"""The docs' relative links lead to files that exist, and the evidence in results/ names no machine's own paths."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO, tracked

LINK = re.compile(r"\]\(([^)\s]+)\)")
MACHINE_PATH = re.compile(r"/work/|/root/|/home/|/tmp/")


def broken_links(doc: Path) -> list[str]:
    """Return a Markdown file's relative links whose target does not exist."""
    targets = [target.split("#", 1)[0] for target in LINK.findall(doc.read_text())]
    return [target for target in targets
            if target and not re.match(r"[a-z]+:", target) and not (doc.parent / target).exists()]


def test_every_relative_link_of_every_markdown_file_exists() -> None:
    """No doc, README or report links a file that is not there."""
    found = {name: links for name in tracked("*.md") if (links := broken_links(REPO / name))}
    assert not found, found


def test_the_results_name_no_machines_paths() -> None:
    """Evidence files write the checkout as <repo>, a home as <home>, a scratch directory as <tmp>."""
    found = [name for name in tracked("results")
             if not name.endswith(".png") and MACHINE_PATH.search((REPO / name).read_text(errors="replace"))]
    assert not found, found
