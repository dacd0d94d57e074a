"""The hosts this scenario's reruns of site.yml use (tests/test_check_mode.py, tests/test_in_sync.py), and where
the converge reports."""

from __future__ import annotations

from pathlib import Path

import pytest
import testinfra.host

# mdef3 runs what mdef2 runs (the realtime scene alone) and is there for the rollouts' second batch
# (tests/test_rollout.py); a third copy of each rerun would check the same code on the same config again.
RERUN_HOSTS = ("mdef1", "mdef2")
LIMIT = ",".join(RERUN_HOSTS)
SITE_REPORTS = Path(__file__).resolve().parents[3] / "reports" / "molecule-default"  # converge.yml's report dir


def rerun_host(host: testinfra.host.Host) -> str:
    """Return the host's inventory name, skipping its test when the reruns leave it out."""
    name = host.backend.get_hostname()
    if name not in RERUN_HOSTS:
        pytest.skip(f"{name} runs mdef2's config; the reruns use {LIMIT}")
    return name
