#!/usr/bin/env python3
"""Ansible inventory of the running lab hosts (lab name from env VFL_LAB, state dir from VFL_LAB_DIR)."""

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
    print(json.dumps(lab.inventory()))
