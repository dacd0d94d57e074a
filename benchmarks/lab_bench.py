#!/usr/bin/env python3
"""Time the lab: debian12 root build, lab up/down with a cached root, and `ansible -m setup` on lab hosts."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import REPO, BenchError, Lab, Results, markdown_table, record, repeat, timed, write_json

LAB_TOOL = str(REPO / "tools" / "lab")
ANSIBLE = str(REPO / ".venv" / "bin" / "ansible")
LAB = Lab("bench", 231)  # lab indexes 231..233: far from the ones `make lab-up` and molecule use
FRESH_SSH_ARGS = "-o ControlMaster=no -o ControlPath=none"


def build_root_fresh() -> float:
    """Build the debian12 root in a fresh temporary state dir (a real debootstrap) and return its time."""
    state_dir = tempfile.mkdtemp(prefix="vfl-bench-root-")
    try:
        return timed([LAB_TOOL, "build-root", "--distro", "debian12", "--state-dir", state_dir])
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def up_down(results: Results, hosts: int, runs: int) -> None:
    """Time `lab up` of `hosts` bench hosts from a cached root, and the `lab down` after it, `runs` times."""
    for _ in range(runs):
        record(results, f"lab up, {hosts} host(s), cached root",
               timed(LAB.tool("up", "--hosts", str(hosts), "--first-index", str(LAB.first_index))))
        record(results, f"lab down, {hosts} host(s)", timed(LAB.tool("down")))


def ansible_env(control_dir: str, fresh: bool) -> dict[str, str]:
    """Return the environment of an ad hoc ansible run on the bench lab, without the fact cache."""
    env = {**LAB.env, "ANSIBLE_SSH_CONTROL_PATH_DIR": control_dir}
    if fresh:
        env["ANSIBLE_SSH_ARGS"] = FRESH_SSH_ARGS
    return env


def setup_runs(results: Results, runs: int) -> None:
    """Time `ansible -m setup` on 1 and 3 running bench hosts, over persistent and fresh SSH connections."""
    control_dir = tempfile.mkdtemp(prefix="vfl-bench-cp-")
    try:
        warm, fresh = ansible_env(control_dir, fresh=False), ansible_env(control_dir, fresh=True)
        setup = [ANSIBLE, "-i", "inventory/lab", "gpu_hosts", "-m", "ansible.builtin.setup"]
        timed(setup, warm)  # warm-up: opens the ControlPersist master connection of every host
        repeat(results, "setup, 1 host, persistent connection", runs, lambda: timed([*setup, "-l", "bench1"], warm))
        repeat(results, "setup, 3 hosts, persistent connection", runs, lambda: timed(setup, warm))
        repeat(results, "setup, 1 host, fresh connection each run", runs,
               lambda: timed([*setup, "-l", "bench1"], fresh))
    finally:
        shutil.rmtree(control_dir, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    """Return the command line options."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="runs of each lab and ansible benchmark (default 5)")
    parser.add_argument("--root-runs", type=int, default=3, help="runs of the debian12 root build (default 3)")
    parser.add_argument("--skip-root", action="store_true", help="skip the root build benchmark")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write raw timings and medians to FILE")
    args = parser.parse_args()
    if args.runs < 1 or args.root_runs < 1:
        parser.error("--runs and --root-runs must be at least 1")
    return args


def main() -> int:
    """Run every benchmark, always take the bench lab down, and print the Markdown table."""
    args = parse_args()
    refusal = LAB.cannot_start("lab_bench")
    if refusal:
        print(refusal, file=sys.stderr)
        return 1
    results: Results = {}
    try:
        if not args.skip_root:
            repeat(results, "root build, debian12 (debootstrap)", args.root_runs, build_root_fresh)
        timed([LAB_TOOL, "build-root", "--distro", "debian12"])  # untimed: make sure the cached root exists
        for hosts in (1, 3):
            up_down(results, hosts, args.runs)
        timed(LAB.tool("up", "--hosts", "3", "--first-index", str(LAB.first_index)))
        setup_runs(results, args.runs)
    except BenchError as error:
        print(f"lab_bench: {error}", file=sys.stderr)
        return 1
    finally:
        subprocess.run(LAB.tool("down"), cwd=REPO, capture_output=True, check=False)
        if args.json and results:
            write_json(args.json, results)
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
