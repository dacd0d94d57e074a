#!/usr/bin/env python3
"""playbooks/check.yml on the example fleet (3 GPU hosts and a gateway, addresses that reach nothing): how long every
controller-side check takes without contacting a host. Prints medians over --runs runs."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchlib import REPO, markdown_table, repeat, timed, write_json

sys.path.insert(0, str(REPO / "tools"))

from example_fleet import example_fleet  # noqa: E402


def main() -> int:
    """Time check.yml on a fresh copy of the example fleet and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", help="also write the timings to this file (relative to the repo)")
    args = parser.parse_args()
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory"}
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        inventory = example_fleet(Path(scratch))
        argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "playbooks/check.yml", "-i", str(inventory)]
        repeat(results, "check.yml, 3 GPU hosts + 1 gateway, no SSH", args.runs, lambda: timed(argv, env))
    if args.json:
        write_json(REPO / args.json, results)
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
