#!/usr/bin/env python3
"""Judge together the candidates that separate runs of playbooks/tune.yml swept as their deployed settings (a host
without systemd, where each candidate is started by hand): the verdict, the report and the picture of them all.

    tools/tune_merge.py --out reports/tune/gpu1/realtime-all preset=RUN1/gpu1/realtime.json seqs64=RUN2/gpu1/realtime.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ansible_collections.vllm.fleet.plugins.plugin_utils import tuning, tuning_plot


def main(argv: list[str] | None = None) -> int:
    """Read NAME=REPORT pairs (the first is the baseline), write OUT.json, .md, .png and .svg, print the verdict."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="path stem of the merged report")
    parser.add_argument("reports", nargs="+", help="NAME=PATH of each run's <scene>.json, the baseline first")
    args = parser.parse_args(argv)
    named = [(name, json.loads(Path(path).read_text())) for name, _, path in (r.partition("=") for r in args.reports)]
    merged = tuning.merge(named)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(merged, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(tuning.markdown(merged["host"], merged["scene"], merged) + "\n")
    for suffix in (".png", ".svg"):
        tuning_plot.plot(merged["host"], merged["scene"], merged, float(merged["slo"]["p99_tpot_ms"]),
                         args.out.with_suffix(suffix))
    print(merged["message"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
