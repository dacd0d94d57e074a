"""Role preflight checks that need a host's facts, run on the controller as their own host (local connection):
each refusal is one line naming the host, the variable and the fix. And, read from the roles' YAML, the check every
preflight makes first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def _renders(role: Path) -> bool:
    """Whether a role writes its settings into files on a host (templates), or checks its inputs (a preflight).
    A library role (no tasks/main.yml, as vllm_fleet) renders only from entry points that other roles include."""
    if not (role / "tasks" / "main.yml").is_file():
        return False
    return (role / "templates").is_dir() or (role / "tasks" / "preflight.yml").is_file()


def _runs_preflight(task: dict[str, Any]) -> bool:
    """Whether a task of main.yml includes or imports preflight.yml."""
    for action in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
        target = task.get(action)
        if (target.get("file") if isinstance(target, dict) else target) == "preflight.yml":
            return True
    return False


@pytest.mark.parametrize("role", [p.name for p in sorted((REPO / "roles").iterdir()) if _renders(p)])
def test_every_preflight_first_refuses_line_breaks_in_the_role_s_settings(role: str) -> None:
    """A role with templates or a preflight runs tasks/preflight.yml from its main.yml, and the first task there is
    the kit's shared check of the role's settings (vllm_fleet's tasks/strings.yml), before any task reads them."""
    tasks = REPO / "roles" / role / "tasks"
    assert (tasks / "preflight.yml").is_file(), f"{role}: has templates but no tasks/preflight.yml"
    assert any(_runs_preflight(task) for task in yaml.safe_load((tasks / "main.yml").read_text())), (
        f"{role}: tasks/main.yml does not run preflight.yml")
    first = yaml.safe_load((tasks / "preflight.yml").read_text())[0]
    assert first.get("ansible.builtin.include_role") == {"name": "vllm_fleet", "tasks_from": "strings"}, (
        f"{role}: the first task of tasks/preflight.yml is {first.get('name')!r}, not the shared check")
    assert first.get("vars", {}).get("vllm_fleet_strings_role") == role
