#!/usr/bin/env python3
"""Render the fleet's Grafana dashboard (plugins/plugin_utils/dashboard.py) into dashboards/vllm-fleet.json.

Run it after changing a panel: `tools/dashboard.py --write`; `--check` (what tests/test_dashboard.py asserts) exits 1
while the file differs, `--queries` prints every panel's runnable PromQL as JSON: [[title, expr, needs], ...].
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from ansible_collections.vllm.fleet.plugins.plugin_utils import dashboard

REPO = Path(__file__).resolve().parents[1]


DASHBOARD = REPO / "dashboards" / "vllm-fleet.json"


def rendered() -> str:
    """Return the dashboard's JSON text as the repo holds it."""
    return json.dumps(dashboard.dashboard(), indent=2, sort_keys=False) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    """Write, check or list the dashboard; exit 1 when --check finds the file stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help=f"rewrite {DASHBOARD.relative_to(REPO)}")
    action.add_argument("--check", action="store_true", help="exit 1 if the file differs from the panels")
    action.add_argument("--queries", action="store_true", help="print every runnable query as JSON")
    args = parser.parse_args(argv)
    if args.queries:
        print(json.dumps(dashboard.panel_queries(), indent=2))
        return 0
    if args.write:
        DASHBOARD.parent.mkdir(parents=True, exist_ok=True)
        DASHBOARD.write_text(rendered())
        print(f"{DASHBOARD.relative_to(REPO)}: written, {len(dashboard.PANELS)} panels")
        return 0
    if not DASHBOARD.is_file() or DASHBOARD.read_text() != rendered():
        print(f"{DASHBOARD.relative_to(REPO)}: differs from plugins/plugin_utils/dashboard.py; "
              "run tools/dashboard.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
