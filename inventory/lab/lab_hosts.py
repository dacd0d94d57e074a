#!/usr/bin/env python3
"""Ansible inventory of the running lab hosts (lab name from env VFL_LAB, state dir from VFL_LAB_DIR, the gateways in
group monitoring too unless VFL_LAB_MONITORING=0)."""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from vfl_lab.cli import DEFAULT_STATE_DIR  # noqa: E402
from vfl_lab.lab import Lab  # noqa: E402

if "--host" in sys.argv:
    print("{}")
else:
    lab = Lab(Path(os.environ.get("VFL_LAB_DIR", DEFAULT_STATE_DIR)), os.environ.get("VFL_LAB", "lab"))
    # The gateways are the lab's monitoring hosts too, unless VFL_LAB_MONITORING=0 (molecule's default scenario, which
    # tests the main job without them).
    print(json.dumps(lab.inventory(os.environ.get("VFL_LAB_MONITORING", "1") != "0")))
