"""Vault hygiene: the kit's ansible.cfg names no vault identity, and values encrypted with the lab's public password
are refused outside the lab."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from example_fleet import SECRETS, example_fleet
from test_check_playbook import check

sys.path.insert(0, str(REPO / "lib"))

from vllm_fleet import vault  # noqa: E402

LAB_VAULT = REPO / "inventory" / "lab" / "group_vars" / "gpu_hosts" / "vault.yml"


def test_the_kit_root_encrypts_with_no_identity_of_its_own(tmp_path: Path) -> None:
    """ansible-vault in the kit's root, with the kit's ansible.cfg and no identity given, refuses to encrypt instead of
    using the lab's public password; with your own id the value carries that id."""
    env = {k: v for k, v in os.environ.items() if k != "ANSIBLE_VAULT_IDENTITY_LIST"}
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    tool = str(REPO / ".venv" / "bin" / "ansible-vault")
    bare = subprocess.run([tool, "encrypt_string", "--name", "x", "secret"], cwd=REPO, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, check=False)
    assert bare.returncode != 0 and ";lab" not in bare.stdout
    password = tmp_path / "prod-password"
    password.write_text("a password of our own\n")
    own = subprocess.run([tool, "encrypt_string", "--vault-id", f"prod@{password}", "--name", "x", "secret"],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert "$ANSIBLE_VAULT;1.2;AES256;prod" in own.stdout


def test_vars_files_of_a_host(tmp_path: Path) -> None:
    """A host's variables come from its groups', all's and its own files and directories, any YAML/JSON suffix."""
    for name in ("group_vars/gpu_hosts/vault.yml", "group_vars/all.yaml", "group_vars/other.yml",
                 "host_vars/gpu1.json", "host_vars/gpu2.yml", "group_vars/gpu_hosts/notes/deep.yml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    found = {str(p.relative_to(tmp_path)) for p in vault.vars_files([str(tmp_path)], ["gpu_hosts"], "gpu1")}
    assert found == {"group_vars/gpu_hosts/vault.yml", "group_vars/all.yaml", "host_vars/gpu1.json",
                     "group_vars/gpu_hosts/notes/deep.yml"}


def test_lab_encrypted_values_are_named_with_the_fix(tmp_path: Path) -> None:
    """A file with a lab-encrypted value is named with the fix; other vault ids and plain files pass."""
    (tmp_path / "group_vars").mkdir()
    shutil.copy(LAB_VAULT, tmp_path / "group_vars" / "gpu_hosts.yml")
    (tmp_path / "group_vars" / "all.yml").write_text("x: !vault |\n  $ANSIBLE_VAULT;1.2;AES256;prod\n  6162\n")
    problem = vault.lab_secret_problem("gpu1", [str(tmp_path)], ["gpu_hosts"])
    assert problem.startswith(f"gpu1: {tmp_path}/group_vars/gpu_hosts.yml hold(s) values encrypted with the lab's")
    assert "--vault-id prod@prompt" in problem
    assert vault.lab_secret_problem("gw", [str(tmp_path)], ["gateways"]) == ""


def test_check_refuses_a_host_holding_lab_secrets(tmp_path: Path) -> None:
    """The lab's vault file copied into one host's vars: that host is refused in one line, before anything reads the
    values; the other hosts and the gateway, whose files are clean, pass."""
    inventory = example_fleet(tmp_path)
    host_vars = inventory / "host_vars" / "gpu-3090-b.yml"
    host_vars.write_text(host_vars.read_text() + LAB_VAULT.read_text().removeprefix("---\n"))
    done = check(inventory)
    summary = done.stdout.split("FAILED HOSTS")[1].strip().splitlines()[1:]
    assert len(summary) == 1 and summary[0].startswith(
        f"gpu-3090-b: {host_vars} hold(s) values encrypted with the lab's public "
        "vault password"), done.stdout[-3000:]
    for host in ("gpu-3090-a", "gpu-4090-a", "gateway-a"):
        assert f"{host:<27}: ok=" in done.stdout and f"{host}: " not in "\n".join(summary)
    assert "changed=1" not in done.stdout


def encrypt_secrets(inventory: Path) -> None:
    """Encrypt the example fleet's secrets with a vault id (prod) whose password no test run is given (by the CLI: the
    module ansible.parsing.vault, once imported, changes how later in-process module tests report warnings)."""
    password = inventory / "prod-password"
    password.write_text("the fleet's own password\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_VAULT")}
    for group, values in SECRETS.items():
        blocks = [subprocess.run([str(REPO / ".venv" / "bin" / "ansible-vault"), "encrypt_string", "--vault-id",
                                  f"prod@{password}", "--name", name, value], env=env, capture_output=True, text=True,
                                 check=True, timeout=60).stdout for name, value in values.items()]
        (inventory / "group_vars" / group / "secrets.yml").write_text("".join(blocks))
    password.unlink()


def test_check_runs_without_the_vault_when_told(tmp_path: Path) -> None:
    """A pull-request preview holds no Vault password: check.yml reads a vaulted key and fails, unless the run says it
    holds no secret; then every check passes and the vaulted keys count as set."""
    inventory = example_fleet(tmp_path)
    encrypt_secrets(inventory)
    env_without_vault = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_VAULT")}
    with pytest.MonkeyPatch.context() as patch:
        for name in set(os.environ) - set(env_without_vault):
            patch.delenv(name)
        reading = check(inventory)
        without = check(inventory, "-e", "vllm_fleet_without_secrets=true")
    assert reading.returncode != 0 and "no vault secrets" in reading.stdout, reading.stdout[-3000:]
    assert without.returncode == 0, without.stdout[-3000:]
    assert "Check the gateway's users" in without.stdout


@pytest.mark.parametrize(("check_mode", "refused"), [(False, True), (True, False)])
def test_a_run_without_secrets_only_looks(check_mode: bool, refused: bool, tmp_path: Path) -> None:
    """-e vllm_fleet_without_secrets=true outside check mode is refused in one line before anything changes."""
    play = tmp_path / "play.yml"
    play.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.import_tasks: "
                    f"{REPO}/playbooks/tasks/refuse-changes-without-secrets.yml\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "controller,", "-c", "local", str(play),
            "-e", f"ansible_python_interpreter={sys.executable}", "-e", "vllm_fleet_without_secrets=true",
            *(["--check"] if check_mode else [])]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode != 0) == refused, done.stdout[-2000:]
    assert ("controller: vllm_fleet_without_secrets is true, which only a check may be" in done.stdout) == refused
