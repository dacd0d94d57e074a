#!/usr/bin/env python3
"""Run molecule scenarios in parallel lanes, each lane in order; print each scenario's whole log when it ends.

At the end come a table of times, then, in a few lines, why each failed scenario failed: CI keeps only the output's end.

Scenarios that serve vLLM are CPU-bound on the lab's cores, so they share one lane; the scenarios that do not (the
driver role on its Ubuntu hosts, the exporter, the model files, the drift timer, the vLLM install) run beside them. Every
scenario uses its own lab indexes (tests/test_molecule_scenarios.py), so lanes never touch each other's hosts.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
# molecule boxes the output of the commands it runs in "  │ ".
BOX = re.compile(r"^ *│ ?")
TASK = re.compile(r"^TASK \[(.*)\]")
RESULT = re.compile(r"^(?:fatal|failed): \[")
RESULT_KEY = re.compile(r"^    (\w+):")
# The fields of a failed Ansible result that say why; the rest (cmd, *_lines, times) only take room.
WHY_KEYS = {"msg", "rc", "stderr", "stdout", "module_stderr", "assertion"}
PYTEST_ERROR = re.compile(r"^E  ")
# molecule's banner at each action's start and end: "INFO     default ➜ converge: Executing".
ACTION = re.compile(r"^INFO\s+\S+ ➜ (\w+): (Executing|Executed)")
PHASES = ("create", "prepare", "check", "converge", "idempotence", "verify", "destroy")


def parse_lanes(specs: list[str]) -> list[list[str]]:
    """Turn lane specs like "vllm,vllm_scenes" into lists of scenario names."""
    return [[name for name in spec.split(",") if name] for spec in specs]


def scenario_command(name: str, nice: int = 0) -> list[str]:
    """Return the command that runs one scenario, at the given niceness (0: as this process runs)."""
    return (["nice", "-n", str(nice)] if nice else []) + ["molecule", "test", "-s", name]


def lane_problems(lanes: list[list[str]], scenarios: list[str], every: bool = True) -> list[str]:
    """Return what is wrong with the lanes: an unknown or repeated scenario, or (when every) one that no lane runs."""
    named = [name for lane in lanes for name in lane]
    problems = [f"no scenario {name!r} (molecule/{name}/molecule.yml)" for name in named if name not in scenarios]
    problems += [f"{name!r} is in more than one lane" for name in sorted(set(named)) if named.count(name) > 1]
    problems += [f"no lane runs {name!r}" for name in scenarios if every and name not in named]
    return problems


def plain_lines(log: str) -> list[str]:
    """Return a molecule log's lines without colours and without the box molecule draws around command output."""
    return [BOX.sub("", COLOUR.sub("", line)) for line in log.splitlines()]


def failed_results(lines: list[str]) -> list[list[str]]:
    """Return each failed Ansible result as its task line, its first line and only the fields that say why."""
    results, task = [], ""
    for start, line in enumerate(lines):
        if match := TASK.match(line):
            task = f"TASK [{match[1]}]"
        if not RESULT.match(line):
            continue
        kept, keep = [task, line.rstrip()], False
        for field in lines[start + 1:]:
            if not field.startswith(" "):
                break
            if key := RESULT_KEY.match(field):
                keep = key[1] in WHY_KEYS
            if keep:
                kept.append(field.rstrip()[:300])
        results.append(kept)
    # A loop's summary ("All items completed") repeats the failed item printed just before it.
    return [r for r in results if r[2:] != ["    msg: All items completed"]]


def failure_reason(log: str, width: int = 1500) -> str:
    """Return in at most width characters why a scenario failed: its last failed result and pytest's E lines."""
    lines = plain_lines(log)
    results = failed_results(lines)
    why = [*(results[-1] if results else []), *[line for line in lines if PYTEST_ERROR.match(line)][-12:]]
    text = "\n".join(why or lines[-15:])
    return text if len(text) <= width else text[:width - 6] + " [...]"


def phase_seconds(banners: list[tuple[float, str]], ended: float) -> dict[str, float]:
    """Return seconds per molecule action from its banner lines and their times (an action run twice is summed; one
    that never printed its end, a failure, lasts until ended)."""
    totals: dict[str, float] = {}
    running: dict[str, float] = {}
    for at, line in banners:
        match = ACTION.match(COLOUR.sub("", line))
        if not match:
            continue
        action, what = match[1], match[2]
        if what == "Executing":
            running[action] = at
        elif action in running:
            totals[action] = totals.get(action, 0.0) + at - running.pop(action)
    for action, at in running.items():
        totals[action] = totals.get(action, 0.0) + ended - at
    return totals


class LaneRunner:
    """Runs the lanes' scenarios; after a failure, no lane starts another scenario."""

    def __init__(self, command: Callable[[str], list[str]], log_dir: Path, out: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Keep how to run a scenario, where its log goes, how to print and what tells the time."""
        self.command, self.log_dir, self.out, self.clock = command, log_dir, out, clock
        self.failed = threading.Event()
        self.lock = threading.Lock()
        self.results: list[tuple[str, int, float, bool]] = []
        self.phases: dict[str, dict[str, float]] = {}

    def log_path(self, scenario: str) -> Path:
        """Return where a scenario's log goes."""
        return self.log_dir / f"{scenario}.log"

    def run_lane(self, number: int, lane: list[str]) -> None:
        """Run one lane's scenarios in order until one fails or another lane has failed."""
        for scenario in lane:
            if self.failed.is_set():
                return
            log = self.log_path(scenario)
            with self.lock:
                self.out(f"==== molecule {scenario} (lane {number}): started, log in {log}")
            started = self.clock()
            passed, banners = self.run_logged(scenario, log)
            seconds = self.clock() - started
            self.phases[scenario] = phase_seconds(banners, started + seconds)
            if not passed:
                self.failed.set()
            with self.lock:
                self.results.append((scenario, number, seconds, passed))
                verdict = "passed" if passed else "FAILED"
                self.out(f"==== molecule {scenario} (lane {number}): {verdict} in {seconds:.0f} s; its log follows")
                self.out(log.read_text(errors="replace"))

    def run_logged(self, scenario: str, log: Path) -> tuple[bool, list[tuple[float, str]]]:
        """Run one scenario with its output into log; return whether it passed and its action banners, timed."""
        banners: list[tuple[float, str]] = []
        with log.open("w") as stream, subprocess.Popen(self.command(scenario), cwd=REPO, stdout=subprocess.PIPE,
                                                       stderr=subprocess.STDOUT, text=True, errors="replace") as run:
            assert run.stdout is not None
            for line in run.stdout:
                stream.write(line)
                if "➜" in line:
                    banners.append((self.clock(), line))
        return run.returncode == 0, banners

    def run(self, lanes: list[list[str]]) -> bool:
        """Run every lane at once; return whether every scenario that ran passed and none was left out."""
        threads = [threading.Thread(target=self.run_lane, args=(n, lane)) for n, lane in enumerate(lanes, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return not self.failed.is_set()

    def summary(self) -> str:
        """Return a Markdown table of the scenarios that ran, in the order they ended."""
        rows = [f"| {name} | {lane} | {seconds:.0f} | {'passed' if ok else 'FAILED'} |"
                for name, lane, seconds, ok in self.results]
        table = ["| scenario | lane | seconds | result |", "|---|---:|---:|---|", *rows]
        phases = [f"| {name} | " + " | ".join(f"{self.phases.get(name, {})[p]:.0f}" if p in self.phases.get(name, {})
                                              else "" for p in PHASES) + " |" for name, *_ in self.results]
        return "\n".join([*table, "", "| scenario | " + " | ".join(PHASES) + " |",
                          "|---|" + "---:|" * len(PHASES), *phases])

    def failures(self, width: int = 1500) -> str:
        """Return, in at most about width characters, why each failed scenario failed."""
        failed = [name for name, _, _, ok in self.results if not ok]
        return "\n".join(f"==== why molecule {name} failed (whole log above and in {self.log_path(name)})\n"
                         + failure_reason(self.log_path(name).read_text(errors="replace"), width // len(failed))
                         for name in failed)


def main(argv: list[str]) -> int:
    """Check the lanes against molecule/*/molecule.yml, run them, print the summary; 1 on any failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lanes", nargs="+", help="one argument per lane: scenario names joined by commas")
    parser.add_argument("--only", action="store_true", help="run just the scenarios named (no check that all run)")
    parser.add_argument("--nice", type=int, default=0, help="niceness of every lane but the first (default 0)")
    args = parser.parse_args(argv)
    lanes = parse_lanes(args.lanes)
    scenarios = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
    problems = lane_problems(lanes, scenarios, every=not args.only)
    if problems:
        print("molecule_lanes: " + "; ".join(problems) + ". Fix MOLECULE_LANES in the Makefile.", file=sys.stderr)
        return 2
    log_dir = REPO / ".cache" / "molecule-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    lane_of = {name: number for number, lane in enumerate(lanes, 1) for name in lane}
    runner = LaneRunner(lambda name: scenario_command(name, args.nice if lane_of[name] > 1 else 0), log_dir,
                        lambda text: print(text, flush=True))
    passed = runner.run(lanes)
    print(runner.summary())
    if not passed:
        print(runner.failures())
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
