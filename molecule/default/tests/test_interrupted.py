"""A rollout that did not finish on a host (its controller stopped after the snapshot) leaves its mark there: the
next rollout's snapshot step refuses the host in one line naming the fix, and playbooks/restore.yml puts back what
the host ran before, verifies it and clears the mark. The snapshot tasks are playbooks/rollout.yml's own."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
sys.path.insert(0, str(REPO / "molecule" / "shared"))

from playbooks import lab_host, run_playbook  # noqa: E402

LAB = os.environ.get("VFL_LAB", "mdef")
HOST = "mdef2"
MARK = "/var/lib/vllm-fleet/rollback.in-progress.json"
SNAPSHOT_AS_A_ROLLOUT = """---
- name: Snapshot as playbooks/rollout.yml does before it deploys
  hosts: gpu_hosts
  gather_facts: false
  tasks:
    - name: Record what the host runs now
      ansible.builtin.include_role:
        name: vllm_state
        tasks_from: snapshot
      vars:
        vllm_state_run: rollout
"""


@functools.cache
def interrupted_then_restored() -> tuple[subprocess.CompletedProcess[str], str, subprocess.CompletedProcess[str],
                                         subprocess.CompletedProcess[str], bool]:
    """Snapshot mdef2 as a rollout would and stop there; snapshot again as the next rollout; restore; return the
    second snapshot's run, the mark after the first, the restore's run, the first run and whether the mark is gone."""
    with tempfile.TemporaryDirectory() as work:
        play = Path(work) / "snapshot.yml"
        play.write_text(SNAPSHOT_AS_A_ROLLOUT)
        first = run_playbook(SCENARIO, LAB, HOST, str(play))
        mark = lab_host(HOST).file(MARK).content_string
        second = run_playbook(SCENARIO, LAB, HOST, str(play), kit_output=True)
    restored = run_playbook(SCENARIO, LAB, HOST, str(REPO / "playbooks" / "restore.yml"))
    return second, mark, restored, first, not lab_host(HOST).file(MARK).exists


def test_an_unfinished_rollout_refuses_the_next_in_one_line() -> None:
    """The next rollout's snapshot fails the host with when the unfinished one started and the restore command."""
    second, mark, _, first, _ = interrupted_then_restored()
    assert first.returncode == 0 and '"run": "rollout"' in mark, first.stdout[-3000:]
    summary = second.stdout.split("FAILED HOSTS")[1].strip().splitlines()[1:] if "FAILED HOSTS" in second.stdout else []
    assert len(summary) == 1 and summary[0].startswith(f"{HOST}: the rollout started "), second.stdout[-3000:]
    assert "has not finished on this host: if it is still running, wait for it" in summary[0]
    assert f"ansible-playbook playbooks/restore.yml -i <inventory> -l {HOST}" in summary[0]
    assert "changed=0" in second.stdout


def test_restore_playbook_verifies_and_clears_the_mark() -> None:
    """playbooks/restore.yml restores the host, proves its scenes healthy and removes the mark."""
    _, _, restored, _, cleared = interrupted_then_restored()
    assert restored.returncode == 0, restored.stdout[-4000:]
    assert "Verify the restored scenes" in restored.stdout and cleared
