"""tools/lab_vault.py: the lab's Vault files decrypt with its public password; plain values pass through. The password
lies outside every inventory, where Ansible would read it as one."""

import json
import os
import re
import subprocess
from pathlib import Path

import lab_vault

LAB_VARS = lab_vault.REPO / "inventory" / "lab" / "group_vars"


def test_lab_scene_and_gateway_keys_decrypt() -> None:
    """The lab's scene keys and its gateway user's key come out as the long keys preflight accepts."""
    found = lab_vault.lab_secrets(LAB_VARS / "gpu_hosts" / "vault.yml", LAB_VARS / "gateways" / "vault.yml")
    for name in ("vault_lab_realtime_api_key", "vault_lab_batch_api_key", "vault_lab_gateway_key_lab_user"):
        assert len(found[name]) >= 32 and "$ANSIBLE_VAULT" not in found[name]


def test_plain_values_and_empty_files_pass_through(tmp_path: Path) -> None:
    """A file without vault strings reads as YAML; an empty one adds nothing."""
    (tmp_path / "plain.yml").write_text("a: b\n")
    (tmp_path / "empty.yml").write_text("")
    assert lab_vault.lab_secrets(tmp_path / "plain.yml", tmp_path / "empty.yml") == {"a": "b"}


def test_the_lab_password_lies_outside_the_inventories() -> None:
    """The Makefile, molecule and the tools name one lab password file, outside inventory/ (Ansible reads every file
    of an inventory directory as an inventory source); no file under inventory/ holds the password."""
    repo = lab_vault.REPO
    make = re.search(r"ANSIBLE_VAULT_IDENTITY_LIST := lab@\$\(abspath (\S+)\)", (repo / "Makefile").read_text())
    molecule = re.search(r"vault_identity_list: lab@\$\{MOLECULE_PROJECT_DIRECTORY\}/(\S+)",
                         (repo / ".config" / "molecule" / "config.yml").read_text())
    assert make and molecule
    assert repo / make[1] == repo / molecule[1] == lab_vault.PASSWORD_FILE and lab_vault.PASSWORD_FILE.is_file()
    assert lab_vault.IDENTITY == f"lab@{lab_vault.PASSWORD_FILE}"
    assert (repo / "inventory") not in lab_vault.PASSWORD_FILE.parents
    password = lab_vault.PASSWORD_FILE.read_bytes().strip()
    assert not [path for path in (repo / "inventory").rglob("*") if path.is_file() and password in path.read_bytes()]


def test_the_lab_inventory_lists_only_lab_hosts(tmp_path: Path) -> None:
    """With no lab running, the lab's inventory lists no host, and Ansible reads each of its files without a word."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(lab_vault.REPO / "ansible.cfg"), "VFL_LAB_DIR": str(tmp_path),
           "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run([str(lab_vault.REPO / ".venv" / "bin" / "ansible-inventory"), "-i", "inventory/lab", "--list"],
                          cwd=lab_vault.REPO, env=env, capture_output=True, text=True, timeout=120, check=True)
    listed = json.loads(done.stdout)
    assert not listed["_meta"].get("hostvars") and not [group for group in listed.values() if group.get("hosts")]
    assert "WARNING" not in done.stderr, done.stderr
