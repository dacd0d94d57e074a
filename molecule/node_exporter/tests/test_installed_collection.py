"""The kit as a user installs it: the collection built from the checkout, installed into an empty path, and a playbook
of the user's own that calls its roles by their collection names, converging the host the scenario converged from
the checkout with nothing changed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools"))

import lab_vault  # noqa: E402  (tools/lab_vault.py: the lab's vault identity)
import sanity  # noqa: E402  (tools/sanity.py: the build and install make sanity runs)

BIN = Path(sys.executable).parent
PLAYBOOK = """---
- name: The user's own play, with the installed collection's roles
  hosts: gpu_hosts
  roles:
    - role: vllm.fleet.node_exporter
"""


def ansible_env(config: Path) -> dict[str, str]:
    """Return this process's environment without molecule's Ansible settings, with config as the only ansible.cfg."""
    kept = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    return {**kept, "VFL_LAB": "mnex", "ANSIBLE_CONFIG": str(config), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_VAULT_IDENTITY_LIST": lab_vault.IDENTITY}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the collection from the checkout and install the artefact into an empty collections path, as make
    sanity does (tools/sanity.py)."""
    root = tmp_path_factory.mktemp("user")
    config = root / "ansible.cfg"
    # Only the installed copy: no roles path, no plugin paths, and not the venv's path (where the checkout's link is).
    config.write_text(f"[defaults]\ncollections_path = {root}\nroles_path = {root / 'roles'}\n"
                      "collections_scan_sys_path = false\ninterpreter_python = auto_silent\n"
                      "[ssh_connection]\npipelining = true\n")
    sanity.build_and_install(REPO, root, BIN, ansible_env(config))
    (root / "play.yml").write_text(PLAYBOOK)
    return root


def test_the_installed_collection_lists_the_kit(installed: Path) -> None:
    """ansible-galaxy sees vllm.fleet in the user's collections path, from the artefact, not the checkout."""
    listed = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "list", "vllm.fleet"], cwd=installed,
                            env=ansible_env(installed / "ansible.cfg"), capture_output=True, text=True, check=True)
    assert str(installed / "ansible_collections") in listed.stdout
    assert not (installed / "ansible_collections" / "vllm" / "fleet").is_symlink()


def test_its_roles_by_collection_name_converge_the_host_unchanged(installed: Path) -> None:
    """The user's play runs vllm.fleet.node_exporter (and the vllm_fleet role it depends on) from the installed tree
    on the lab host: every task ok, none changed, since the checkout's roles left the host the same way."""
    inventory = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
    run = subprocess.run([str(BIN / "ansible-playbook"), "-vv", "-i", inventory, str(installed / "play.yml")],
                         cwd=installed, env=ansible_env(installed / "ansible.cfg"), capture_output=True, text=True,
                         timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    recap = re.search(r"^mnex1\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0", run.stdout, re.M)
    assert recap and int(recap.group(1)) > 0 and recap.group(2) == "0", run.stdout[-4000:]
    role_dir = installed / "ansible_collections" / "vllm" / "fleet" / "roles" / "node_exporter"
    assert f"task path: {role_dir}/tasks/" in run.stdout
    assert f"task path: {REPO}/roles/" not in run.stdout
