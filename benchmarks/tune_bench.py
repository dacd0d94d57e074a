#!/usr/bin/env python3
"""What a tuning run costs on the lab: playbooks/tune.yml sweeping one GPU host's realtime scene with the tuner's
defaults (512 tokens in, 128 out, concurrency 1 to twice max_num_seqs, 4 requests per request in flight, the
deployed settings as the one candidate), --runs times: the median wall time of the whole run (plan, preflight,
snapshot, sweep, report, restore, verification). The issue's bound is 6 minutes. The last run's report and picture
are copied to docs/ (--picture)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from benchlib import REPO, Lab, lab_arguments, markdown_table, record, timed

LAB = Lab("mtnb", 246)  # index 246: away from `make lab-up`, molecule and the other benchmarks
REPORTS = REPO / "reports" / "tune-bench"
BOUND_S = 360


def tune() -> float:
    """Run playbooks/tune.yml on the realtime scene with the tuner's defaults; return its wall time."""
    extra = json.dumps({"vllm_tune_scenes": ["realtime"], "vllm_tune_report_dir": str(REPORTS)})
    return timed(LAB.playbook("playbooks/tune.yml", "gpu_hosts", "-e", extra), env=LAB.env)


def main() -> int:
    """Bring up the lab, time the tuning runs, print the table and the last run's verdict."""
    parser = lab_arguments(__doc__, runs=3)
    parser.add_argument("--picture", help="copy the last run's report (.md, .png, .svg) to this path stem (in docs/)")
    args = parser.parse_args()
    if problem := LAB.up("tune_bench.py", 1, 0, args.reuse):
        print(problem, file=sys.stderr)
        return 1
    try:
        LAB.converge()
        results: dict[str, list[float]] = {}
        for _ in range(args.runs):
            record(results, "tune.yml, realtime, lab defaults", tune())
        print(markdown_table(results))
        host = next(REPORTS.iterdir()).name
        base = REPORTS / host / "realtime"
        print(json.loads(base.with_suffix(".json").read_text())["message"])
        if args.picture:
            (REPO / args.picture).parent.mkdir(parents=True, exist_ok=True)
            for suffix in (".md", ".png", ".svg"):
                shutil.copy(base.with_suffix(suffix), REPO / f"{args.picture}{suffix}")
        worst = max(results["tune.yml, realtime, lab defaults"])
        print(f"bound {BOUND_S} s: {'held' if worst <= BOUND_S else 'BROKEN'} (slowest run {worst:.0f} s)")
    finally:
        if not args.keep:
            subprocess.run(LAB.tool("down"), check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
