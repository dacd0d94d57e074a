#!/usr/bin/env python3
"""What a tuning run costs on the lab: playbooks/tune.yml sweeping one GPU host's realtime scene with the tuner's
defaults (512 tokens in, 128 out, concurrency 1 to twice max_num_seqs, 4 requests per request in flight, the
deployed settings as the one candidate), then with two candidates more (max-num-seqs 8 and 32: each started, swept
and compared, the sweep's top kept at 32), --runs times each: the median wall time of the whole run (plan,
preflight, snapshot, sweeps, report, restore, verification). The bound for one sweep is 6 minutes. The last
default run's report and picture are copied to results/ (--picture)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

from benchlib import REPO, Lab, lab_arguments, markdown_table, record, timed

LAB = Lab("mtnb", 246)  # index 246: away from `make lab-up`, molecule and the other benchmarks
REPORTS = REPO / "reports" / "tune-bench"
BOUND_S = 360


DEFAULTS = "tune.yml, realtime, lab defaults"
CANDIDATES = "tune.yml, realtime, 3 candidates"
# Two candidates besides the deployed settings; the top stays twice the preset's 16, as in the default run.
THREE = {"vllm_tune_candidates": {"realtime": [{"name": "seqs8", "engine_args": {"max-num-seqs": 8}},
                                               {"name": "seqs32", "engine_args": {"max-num-seqs": 32}}]},
         "vllm_tune_max_concurrency": 32}


def tune(report_dir: str, **extra: object) -> float:
    """Run playbooks/tune.yml on the realtime scene with the tuner's defaults and these vars; return its wall time."""
    given = json.dumps({"vllm_tune_scenes": ["realtime"], "vllm_tune_report_dir": report_dir, **extra})
    return timed(LAB.playbook("playbooks/tune.yml", "gpu_hosts", "-e", given), env=LAB.env)


def candidate_times(report: dict[str, Any]) -> list[str]:
    """Return a line per candidate of a tuning report: its start and sweep in seconds, and its verdict."""
    return [f"{c['name']}: {c['seconds']:.0f} s, " + (c["dropped"] or f"knee at {c['knee']['concurrency']}")
            for c in report["candidates"]]


def main() -> int:
    """Bring up the lab, time the tuning runs, print the table and the last run's verdict."""
    parser = lab_arguments(__doc__, runs=3)
    parser.add_argument("--picture", help="copy the last run's report (.md, .png, .svg) to this path stem (in results/)")
    args = parser.parse_args()
    if problem := LAB.up("tune_bench.py", 1, 0, args.reuse):
        print(problem, file=sys.stderr)
        return 1
    try:
        LAB.converge()
        results: dict[str, list[float]] = {}
        for _ in range(args.runs):
            record(results, DEFAULTS, tune(str(REPORTS)))
            record(results, CANDIDATES, tune(str(REPORTS / "candidates"), **THREE))
        print(markdown_table(results))
        host = next(path for path in REPORTS.iterdir() if path.name != "candidates").name
        base = REPORTS / host / "realtime"
        default, three = (json.loads(path.with_suffix(".json").read_text())
                          for path in (base, REPORTS / "candidates" / host / "realtime"))
        print(default["message"], three["message"], sep="\n")
        if args.picture:
            (REPO / args.picture).parent.mkdir(parents=True, exist_ok=True)
            for suffix in (".md", ".png", ".svg"):
                shutil.copy(base.with_suffix(suffix), REPO / f"{args.picture}{suffix}")
        worst = max(results[DEFAULTS])
        print(f"bound {BOUND_S} s: {'held' if worst <= BOUND_S else 'BROKEN'} (slowest run {worst:.0f} s)")
        print(*candidate_times(three), sep="\n")
    finally:
        if not args.keep:
            subprocess.run(LAB.tool("down"), check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
