"""Vault hygiene: the kit's ansible.cfg names no vault identity, and values encrypted with the lab's public password
are refused outside the lab."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import lab_vault
from conftest import REPO
from example_fleet import SECRETS, example_fleet
from test_check_playbook import check

from ansible_collections.vllm.fleet.plugins.plugin_utils import vault

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


class RawHostvars:
    """Stands for Ansible's hostvars: raw_get gives a host's variables as loaded, untemplated."""

    def __init__(self, variables: dict[str, Any]) -> None:
        self.variables = variables

    def raw_get(self, host: str) -> dict[str, Any]:
        """Return the host's variables."""
        return self.variables


def encrypt(plaintext: str, password: bytes, vault_id: str | None) -> str:
    """Return plaintext encrypted with password: a 1.1 envelope without vault_id, 1.2 naming it with one."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    return VaultLib().encrypt(plaintext, VaultSecret(password), vault_id=vault_id).decode()


def test_values_the_lab_password_decrypts_are_named_whatever_their_header() -> None:
    """A value the lab's password decrypts is named, whatever its header (1.1, 1.2 with any label), however deep and
    in whatever form Ansible holds it (a !vault value, a plain string as an INI file gives it); a value labelled lab
    that another password encrypted passes, and the message holds no value."""
    from ansible.parsing.vault import EncryptedString

    lab = lab_vault.PASSWORD_FILE.read_bytes().strip()
    one_line = encrypt("secret-ini", lab, None).replace("\n", "\\n")  # an INI host line's "\n" between lines
    variables = {
        "vault_header_1_1": EncryptedString(ciphertext=encrypt("secret-1-1", lab, None)),
        "vault_header_1_2": EncryptedString(ciphertext=encrypt("secret-1-2", lab, "prod-2024_team.a")),
        "vllm_gateway_users": [{"name": "alice", "key": EncryptedString(ciphertext=encrypt("secret-deep", lab, "x"))}],
        "vault_ini": one_line,
        "vault_own": EncryptedString(ciphertext=encrypt("secret-own", b"a password of our own", "lab")),
        "notes": "$ANSIBLE_VAULT;1.1;AES256 is how a vault value starts",
        "count": 3,
    }
    problem = vault.lab_secret_problem("gpu1", RawHostvars(variables))
    assert problem.startswith("gpu1: vault_header_1_1, vault_header_1_2, vault_ini, vllm_gateway_users: encrypted "
                              "with the lab's public vault password"), problem
    assert "--vault-id prod@prompt --name vault_header_1_1 " in problem and "\n" not in problem
    assert "secret-" not in problem and "$ANSIBLE_VAULT" not in problem
    assert vault.lab_secret_problem("gpu2", RawHostvars({"vault_own": variables["vault_own"], "n": None})) == ""


def run_guard(where: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run the lab-secret guard alone on every host of the inventories in argv, as check.yml and preflight run it,
    without any vault password; stdout and stderr merged."""
    play = where / "play.yml"
    play.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n"
                    f"    - ansible.builtin.import_tasks: {REPO}/playbooks/tasks/fleet-context.yml\n"
                    f"    - ansible.builtin.import_tasks: {REPO}/playbooks/tasks/refuse-lab-secrets.yml\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_VAULT")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_CACHE_PLUGIN="ansible.builtin.memory")
    return subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), str(play), *argv], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False)


def vault_block(name: str, envelope: str, indent: str = "") -> str:
    """Return a YAML !vault variable, indented."""
    lines = "".join(f"{indent}  {line}\n" for line in envelope.splitlines())
    return f"{indent}{name}: !vault |\n{lines}"


def test_the_guard_decrypts_each_value_wherever_it_is_written(tmp_path: Path) -> None:
    """Values the lab's password encrypted are refused whatever their header and wherever they are written (host_vars,
    a line of an INI hosts file, a YAML inventory), one line per host naming variable and fix and no value; a value
    another password encrypted passes even labelled lab."""
    lab = lab_vault.PASSWORD_FILE.read_bytes().strip()
    fleet = tmp_path / "fleet"
    (fleet / "host_vars").mkdir(parents=True)
    one_line = encrypt("secret-ini", lab, None).replace("\n", "\\n")
    (fleet / "hosts.ini").write_text(f"[gpu_hosts]\nheader-1-1\nheader-1-2\nown-password\nclean\n"
                                     f'ini-inline vault_ini_key="{one_line}"\n')
    (fleet / "host_vars" / "header-1-1.yml").write_text(vault_block("vault_a", encrypt("secret-1-1", lab, None)))
    (fleet / "host_vars" / "header-1-2.yml").write_text(vault_block("vault_b", encrypt("secret-1-2", lab, "prod")))
    (fleet / "host_vars" / "own-password.yml").write_text(
        vault_block("vault_c", encrypt("secret-own", b"a password of our own", "lab")))
    (fleet / "host_vars" / "clean.yml").write_text("vllm_fleet_flavour: cpu\n")
    inline = tmp_path / "inline.yml"
    inline.write_text("gateways:\n  hosts:\n    yaml-inline:\n" +
                      vault_block("vault_d", encrypt("secret-yaml", lab, "lab"), " " * 6))
    done = run_guard(tmp_path, "-i", str(fleet), "-i", str(inline))
    refused = {"header-1-1": "vault_a", "header-1-2": "vault_b", "ini-inline": "vault_ini_key", "yaml-inline": "vault_d"}
    for host, name in refused.items():
        assert f"{host}: {name}: encrypted with the lab's public vault password" in done.stdout, done.stdout[-3000:]
    for host in ("own-password", "clean"):
        assert f"{host:<27}: ok=4" in done.stdout and f"{host}: vault" not in done.stdout, done.stdout[-3000:]
    assert "secret-" not in done.stdout and "$ANSIBLE_VAULT" not in done.stdout


@pytest.mark.parametrize("marked", [True, False])
def test_the_lab_inventory_passes_as_the_lab(marked: bool, tmp_path: Path) -> None:
    """The lab's hosts with the lab's own vars (as molecule links them) pass: the inventory says it is the lab. Not
    saying so, the same hosts are refused for the lab's own secrets."""
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "hosts.yml").write_text("gpu_hosts:\n  hosts:\n    lab1:\ngateways:\n  hosts:\n    lab3:\n"
                                   "monitoring:\n  hosts:\n    lab3:\n")
    for part in ("group_vars", "host_vars"):
        (lab / part).symlink_to(REPO / "inventory" / "lab" / part)
    done = run_guard(tmp_path, "-i", str(lab), *([] if marked else ["-e", '{"vllm_fleet_lab": false}']))
    assert (done.returncode == 0) == marked, done.stdout[-3000:]
    assert ("lab1: vault_lab_batch_api_key, vault_lab_realtime_api_key: encrypted with the lab's public vault "
            "password" in done.stdout) != marked, done.stdout[-3000:]
    assert ("lab3: vault_lab_gateway_key_lab_user, vault_lab_monitoring_password: encrypted" in done.stdout) != marked


def test_check_refuses_a_host_holding_lab_secrets(tmp_path: Path) -> None:
    """The lab's vault file copied into one host's vars: that host is refused in one line, before anything reads the
    values; the other hosts and the gateway, whose files are clean, pass."""
    inventory = example_fleet(tmp_path)
    host_vars = inventory / "host_vars" / "gpu-3090-b.yml"
    host_vars.write_text(host_vars.read_text() + LAB_VAULT.read_text().removeprefix("---\n"))
    done = check(inventory)
    summary = done.stdout.split("FAILED HOSTS")[1].strip().splitlines()[1:]
    assert len(summary) == 1 and summary[0].startswith(
        "gpu-3090-b: vault_lab_batch_api_key, vault_lab_realtime_api_key: encrypted with the lab's public vault "
        "password"), done.stdout[-3000:]
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
    play.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n"
                    f"    - ansible.builtin.import_tasks: {REPO}/playbooks/tasks/fleet-context.yml\n"
                    f"    - ansible.builtin.import_tasks: {REPO}/playbooks/tasks/refuse-changes-without-secrets.yml\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "controller,", "-c", "local", str(play),
            "-e", f"ansible_python_interpreter={sys.executable}", "-e", "vllm_fleet_without_secrets=true",
            *(["--check"] if check_mode else [])]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode != 0) == refused, done.stdout[-2000:]
    assert ("controller: vllm_fleet_without_secrets is true, which only a check may be" in done.stdout) == refused
