"""The host's run lock in the kit's own playbooks: a converge leaves none behind, and while another run holds a host,
site.yml and playbooks/restore.yml refuse it in one line naming the holder, before they change anything."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import testinfra

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path.insert(0, str(REPO / "molecule" / "shared"))

from playbooks import lab_host, run_playbook  # noqa: E402

LAB = os.environ.get("VFL_LAB", "mdef")
HOST = "mdef3"
LOCK = "/run/vllm-fleet/run.lock"


def test_a_converged_host_holds_no_run_lock(host: testinfra.host.Host) -> None:
    """site.yml released the lock it took on every host that went through all its steps."""
    assert not host.file(LOCK).exists


@pytest.mark.parametrize(("playbook", "extra"), [
    # Only the steps tagged always run: the in-sync check and the snapshot step, where site.yml takes the lock.
    ("../../site.yml", ("--tags", "no-step", "-e", "vllm_fleet_skip_in_sync=false")),
    ("../../playbooks/restore.yml", ()),
], ids=["site", "restore"])
def test_a_run_elsewhere_holds_the_host(playbook: str, extra: tuple[str, ...]) -> None:
    """A lock another controller's live run holds refuses the run in one line with the holder and the fix."""
    host = lab_host(HOST)
    holder = {"controller": "ops-laptop", "pid": "4242", "started": "Thu Dec  3 08:00:00 2026",
              "playbook": "rollout", "since": time.time(), "until": time.time() + 3600}
    host.check_output(f"install -d -m 0700 {Path(LOCK).parent} && umask 077 && echo '{json.dumps(holder)}' > {LOCK}")
    try:
        result = run_playbook(SCENARIO, LAB, HOST, playbook, "-e", "vllm_state_lock_wait=1", *extra, kit_output=True)
    finally:
        lock_after = host.check_output(f"cat {LOCK}")
        host.check_output(f"rm -f {LOCK}")
    summary = result.stdout.split("FAILED HOSTS")[-1].strip().splitlines()[1:]
    assert result.returncode != 0 and len(summary) == 1, result.stdout[-3000:]
    assert summary[0].startswith(f"{HOST}: a run of rollout from controller ops-laptop (process 4242, started") \
        and "-e vllm_state_lock_break=true" in summary[0], result.stdout[-3000:]
    assert json.loads(lock_after)["controller"] == "ops-laptop" and "changed=0" in result.stdout, result.stdout[-3000:]
