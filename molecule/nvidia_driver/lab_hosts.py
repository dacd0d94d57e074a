#!/usr/bin/env python3
"""Ansible inventory of the running hosts of several labs (names from env VFL_LABS), so one scenario mixes distros.

The lab tool gives each lab one distro; this scenario needs Debian and Ubuntu hosts side by side.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from vfl_lab.cli import DEFAULT_STATE_DIR  # noqa: E402
from vfl_lab.lab import Lab  # noqa: E402


def merged_inventory(state_dir: Path, names: list[str]) -> dict[str, object]:
    """Return one inventory with the groups and hostvars of every named lab."""
    merged: dict[str, dict] = {"lab": {"hosts": []}, "gpu_hosts": {"hosts": []}, "_meta": {"hostvars": {}}}
    for name in names:
        inventory = Lab(state_dir, name).inventory()
        for group in ("lab", "gpu_hosts"):
            merged[group]["hosts"] += inventory[group]["hosts"]  # type: ignore[index]
        merged["_meta"]["hostvars"].update(inventory["_meta"]["hostvars"])  # type: ignore[index]
    return merged


if "--host" in sys.argv:
    print("{}")
else:
    labs = os.environ.get("VFL_LABS", os.environ.get("VFL_LAB", "lab")).split()
    print(json.dumps(merged_inventory(Path(os.environ.get("VFL_LAB_DIR", DEFAULT_STATE_DIR)), labs)))
