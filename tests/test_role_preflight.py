"""Role preflight checks that need a host's facts, run on the controller as their own host (local connection):
each refusal is one line naming the host, the variable and the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def preflight(role: str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run one role's tasks/preflight.yml against localhost with these extra vars; return the finished run."""
    play = tmp_path / "preflight.yml"
    play.write_text(f"- hosts: all\n  gather_facts: true\n  tasks:\n    - ansible.builtin.include_role:\n"
                    f"        name: {role}\n        tasks_from: preflight\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory",
           "ANSIBLE_NOCOLOR": "1"}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "controller,", "-c", "local", str(play),
            "-e", f"ansible_python_interpreter={sys.executable}", *(a for k, v in extra.items() for a in ("-e", f"{k}={v}"))]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("role", "extra", "line"), [
    ("vllm", {"vllm_releases_keep": "0", "vllm_fleet_flavour": "cuda"},
     "controller: vllm_releases_keep is 0; set it to 1 or more: a failed rollout or converge restores the release"),
])
def test_refusal_is_one_line_with_the_fix(role: str, extra: dict[str, str], line: str, tmp_path: Path) -> None:
    """The role's preflight refuses the value before anything changes, in one line that says what to set."""
    done = preflight(role, tmp_path, **extra)
    summary = done.stdout.split("FAILED HOSTS")[1].strip().splitlines()[1:] if "FAILED HOSTS" in done.stdout else []
    assert len(summary) == 1 and summary[0].startswith(line), done.stdout[-2000:]
    assert "changed=0" in done.stdout


def test_the_defaults_pass(tmp_path: Path) -> None:
    """The same preflight with the role's defaults refuses nothing."""
    done = preflight("vllm", tmp_path, vllm_fleet_flavour="cuda")
    assert done.returncode == 0, done.stdout[-2000:]
