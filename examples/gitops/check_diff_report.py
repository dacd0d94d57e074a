#!/usr/bin/env python3
"""Turn the log of `ansible-playbook ... --check --diff` into a short Markdown report for a pull request.

The report keeps what a reviewer needs: which hosts would change, and for each task that would change something (or
failed) its header, its diff and its `changed:`/`fatal:` lines. Tasks that are `ok` everywhere are left out; the full
log stays in the job's artifact. Standard library only, so it runs with any python3 on the CI runner.

    ansible-playbook site.yml -i inventory/production --check --diff 2>&1 | tee preview/check-diff.log
    python3 examples/gitops/check_diff_report.py --log preview/check-diff.log --rc "$rc" --out preview/report.md

It prints `key=value` lines for the CI (hosts that would change, hosts that failed, drift=true|false), ready to be
appended to $GITHUB_OUTPUT or sourced by a shell.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "<!-- vllm-fleet:check-diff -->"  # the PR comment carrying it is updated in place, not posted again
DEFAULT_MAX_CHARS = 60_000  # GitHub refuses comments over 65,536 characters; GitLab notes allow 1,000,000
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
HEADER = re.compile(r"^(PLAY RECAP|PLAY \[.*\]|TASK \[.*\]|RUNNING HANDLER \[.*\]) \*+\s*$")
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)(?:\s+skipped=(?P<skipped>\d+))?(?:\s+rescued=(?P<rescued>\d+))?"
    r"(?:\s+ignored=(?P<ignored>\d+))?"
)
INTERESTING = ("changed:", "fatal:", "failed:", "--- before", "+++ after", "[ERROR]")
QUIET = ("ok:", "skipping:", "included:")


@dataclass
class Host:
    """One line of the PLAY RECAP."""

    name: str
    ok: int
    changed: int
    unreachable: int
    failed: int


@dataclass
class Report:
    """What a `--check --diff` log says: the recap per host and the sections worth showing."""

    hosts: list[Host] = field(default_factory=list)
    sections: list[list[str]] = field(default_factory=list)
    preamble: list[str] = field(default_factory=list)

    @property
    def changed(self) -> list[Host]:
        """Hosts on which at least one task would change something."""
        return [h for h in self.hosts if h.changed]

    @property
    def broken(self) -> list[Host]:
        """Hosts that failed a task or could not be reached."""
        return [h for h in self.hosts if h.failed or h.unreachable]


def split_sections(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """Split a log into the lines before the first header and one list per PLAY/TASK/HANDLER/RECAP section."""
    preamble: list[str] = []
    sections: list[list[str]] = []
    for line in lines:
        if HEADER.match(line):
            sections.append([line.rstrip("* \t") if not line.startswith("PLAY RECAP") else "PLAY RECAP"])
        elif sections:
            sections[-1].append(line)
        else:
            preamble.append(line)
    return preamble, sections


def without_quiet_results(section: list[str]) -> list[str]:
    """Drop `ok:`/`skipping:` result lines and the indented YAML result that follows each of them."""
    kept: list[str] = []
    skipping = False
    for line in section:
        if line.startswith(QUIET):
            skipping = True
            continue
        if skipping and (line.startswith("    ") or not line.strip()):
            continue
        skipping = False
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return kept


def parse(text: str) -> Report:
    """Parse the output of ansible-playbook's default callback (any result format, colour or not)."""
    lines = ANSI.sub("", text).splitlines()
    preamble, sections = split_sections(lines)
    report = Report(preamble=[line for line in preamble if line.strip()])
    play: list[str] | None = None
    for section in sections:
        head = section[0]
        if head == "PLAY RECAP":
            for line in section[1:]:
                match = RECAP.match(line.strip())
                if match:
                    report.hosts.append(Host(match["host"], int(match["ok"]), int(match["changed"]),
                                             int(match["unreachable"]), int(match["failed"])))
        elif head.startswith("PLAY ["):
            play = [head]
        elif any(line.startswith(INTERESTING) for line in section[1:]):
            if play:
                report.sections.append(play)
                play = None
            report.sections.append(without_quiet_results(section))
    return report


def fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in the text, so a diff cannot close it early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def truncate(lines: list[str], max_chars: int) -> tuple[str, int]:
    """Join lines up to max_chars (whole lines only); return the text and how many lines were left out."""
    out: list[str] = []
    size = 0
    for index, line in enumerate(lines):
        size += len(line) + 1
        if size > max_chars:
            return "\n".join(out), len(lines) - index
        out.append(line)
    return "\n".join(out), 0


def headline(report: Report, rc: int) -> str:
    """One sentence a reviewer reads first."""
    names = ", ".join(f"`{h.name}` ({h.changed})" for h in report.changed)
    if rc != 0 or report.broken:
        broken = ", ".join(f"`{h.name}`" for h in report.broken) or "before any host reported"
        return (f"**The check failed** (exit {rc}): {broken}. Ansible stops a host at its first failure, so what follows "
                "is incomplete for it.")
    if not report.hosts:
        return "**No host was checked**: the play matched no host (check the inventory and `--limit`)."
    if not report.changed:
        return f"**No changes**: all {len(report.hosts)} hosts already match this revision."
    return (f"**{len(report.changed)} of {len(report.hosts)} hosts would change** (tasks that would change, per host): "
            f"{names}.")


def render(report: Report, rc: int, title: str, footer: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The Markdown report: marker, headline, recap table, then the changes as a diff block."""
    parts = [MARKER, f"### {title}", "", headline(report, rc), ""]
    if report.hosts:
        parts += ["| host | ok | would change | unreachable | failed |", "|---|---:|---:|---:|---:|"]
        parts += [f"| `{h.name}` | {h.ok} | {h.changed} | {h.unreachable} | {h.failed} |" for h in report.hosts]
        parts.append("")
    body = [line for section in report.sections for line in [*section, ""]]
    if not report.hosts and not body:
        body = [*report.preamble[-60:]]  # it stopped before any play: show why (inventory, vault, syntax)
    if body:
        budget = max_chars - sum(len(p) + 1 for p in parts) - len(footer) - 400
        text, left_out = truncate(body, max(budget, 1000))
        text = text.rstrip("\n")
        if left_out:
            text += f"\n... {left_out} more lines: see the full log"
        tasks = sum(1 for s in report.sections if s[0].startswith(("TASK", "RUNNING HANDLER")))
        summary = f"What would change ({tasks} tasks)" if report.hosts else "Output"
        marks = fence(text)
        parts += [f"<details open><summary>{summary}</summary>", "", f"{marks}diff", text, marks, "", "</details>", ""]
    if footer:
        parts.append(footer)
    return "\n".join(parts).rstrip() + "\n"


def outputs(report: Report, rc: int) -> str:
    """key=value lines for the CI: which hosts would change or failed, and whether the fleet drifted."""
    changed = ",".join(h.name for h in report.changed)
    broken = ",".join(h.name for h in report.broken)
    drift = "true" if report.changed else "false"
    return f"changed_hosts={changed}\nfailed_hosts={broken}\ndrift={drift}\nclean={'true' if rc == 0 else 'false'}\n"


def main(argv: list[str] | None = None) -> int:
    """Read the log, write the Markdown report, print the key=value lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, required=True, help="the output of ansible-playbook --check --diff")
    parser.add_argument("--rc", type=int, required=True, help="ansible-playbook's exit status")
    parser.add_argument("--out", type=Path, required=True, help="where to write the Markdown report")
    parser.add_argument("--title", default="Fleet preview: `site.yml --check --diff`")
    parser.add_argument("--footer", default="", help="a last line, e.g. a link to the run and its artifact")
    parser.add_argument("--max-chars", type=int, default=DEFAULT_MAX_CHARS)
    args = parser.parse_args(argv)
    text = args.log.read_text(errors="replace") if args.log.exists() else ""
    report = parse(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(report, args.rc, args.title, args.footer, args.max_chars))
    sys.stdout.write(outputs(report, args.rc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
